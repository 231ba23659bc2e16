// PredictLoop: predict_step over the loaders, the predict hooks, and the outputs.
#include "volt/trainer/predict_loop.h"

#include <torch/torch.h>

#include <optional>

#include "volt/core/errors.h"

namespace volt {

namespace {
/// A batch of the dataset's first sample, for a rank that has no sample of its own to run the
/// collective forward with (its output is dropped); none for an iterable or empty dataset.
std::optional<Batch> stand_in(const DataLoader& loader) {
  if (loader.is_iterable() || loader.dataset().size() == 0) return std::nullopt;
  std::vector<Batch> one{loader.dataset().get(0)};
  return loader.options().collate_fn ? loader.options().collate_fn(std::move(one)) : collate(std::move(one));
}
}  // namespace

std::vector<Batch> PredictLoop::run(LightningModule& module, const std::vector<DataLoader*>& loaders,
                                    const BatchCount& count, bool keep_outputs) {
  const RunningStage saved = stage_;
  stage_ = RunningStage::Predict;
  const bool was_training = module.is_training();
  module.eval();
  std::optional<c10::InferenceMode> inference;
  std::optional<torch::NoGradGuard> no_grad;
  if (inference_mode_)
    inference.emplace();
  else
    no_grad.emplace();
  std::vector<Batch> outputs;
  hooks_.on_predict_start(module);
  hooks_.on_predict_epoch_start(module);
  for (int64_t d = 0; d < static_cast<int64_t>(loaders.size()); ++d)
    run_loader(module, *loaders[d], d, count(*loaders[d]), keep_outputs ? &outputs : nullptr);
  hooks_.on_predict_epoch_end(module);
  hooks_.on_predict_end(module);
  if (was_training) module.train();
  stage_ = saved;
  return outputs;
}

void PredictLoop::run_loader(LightningModule& module, DataLoader& loader, int64_t d, int64_t max_batches,
                             std::vector<Batch>* outputs) {
  const bool several = strategy_.world_size() > 1;
  const auto& indices = loader.is_iterable() ? std::vector<int64_t>{} : loader.indices();
  const int64_t bs = loader.options().batch_size;
  if (several) {  // the ranks' counts may differ by one: all run the longest (see [Note: every sample once])
    const bool unknown = max_batches == DataLoader::kUnknownLength;
    const double most =
        strategy_
            .all_reduce(torch::tensor({unknown ? 1e300 : static_cast<double>(max_batches)}, torch::kDouble),
                        ReduceOp::Max)
            .item<double>();
    max_batches = most >= 1e299 ? DataLoader::kUnknownLength : static_cast<int64_t>(most);
  }
  BatchStream stream = loader.iterate(0);
  std::optional<Batch> last;  // repeated by a rank that ran out (see [Note: every sample once])
  for (int64_t i = 0; i < max_batches; ++i) {
    std::optional<Batch> b = stream.next();
    if (several) {
      const auto any = strategy_.all_reduce(torch::tensor({b ? 1.0 : 0.0}, torch::kDouble), ReduceOp::Max);
      if (any.item<double>() == 0.0) break;
      if (!b) {
        if (!last) last = stand_in(loader);  // fewer samples than ranks: this rank has none
        VOLT_CHECK(last.has_value(), ConfigError, "predict: rank ", strategy_.global_rank(),
                   " has no samples of predict dataloader ", d, " while other ranks do (fewer samples than ranks); ",
                   "predict with fewer devices");
        // keeps a collective forward in step; output dropped
        strategy_.predict_step(module, strategy_.batch_to_device(module, *last, d), i, d);
        continue;
      }
    } else if (!b) {
      break;
    }
    const Batch db = strategy_.batch_to_device(module, *b, d);
    hooks_.on_predict_batch_start(module, db, i, d);
    Batch out;
    try {
      out = strategy_.predict_step(module, db, i, d);
    } catch (const detail::HookNotImplemented& e) {
      throw ConfigError(std::string("predict was called but the module does not implement ") + e.hook);
    }
    std::vector<int64_t> samples;
    if (!indices.empty()) {
      const int64_t begin = std::min<int64_t>(i * bs, static_cast<int64_t>(indices.size()));
      const int64_t end = std::min<int64_t>(begin + bs, static_cast<int64_t>(indices.size()));
      samples.assign(indices.begin() + begin, indices.begin() + end);
    }
    hooks_.on_predict_batch_end(module, out, db, samples, i, d);
    if (outputs) outputs->push_back(std::move(out));
    last = std::move(b);
  }
}

}  // namespace volt
