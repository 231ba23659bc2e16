// EvaluationLoop: the validation / test epoch, with its hooks and epoch metrics.
#include "volt/trainer/evaluation_loop.h"

#include <torch/torch.h>

#include "volt/core/errors.h"

namespace volt {

void EvaluationLoop::run(LightningModule& module, const std::vector<DataLoader*>& loaders, RunningStage stage,
                         const BatchCount& count, const FitProgress& progress) {
  const RunningStage saved = stage_;
  stage_ = stage;
  auto scope = profile(strategy_.profiler(), stage == RunningStage::Test     ? "run_test"
                                             : stage == RunningStage::Sanity ? "run_sanity_check"
                                                                             : "run_validation");
  const bool was_training = module.is_training();
  module.eval();
  torch::NoGradGuard ng;
  const bool is_val = stage != RunningStage::Test;
  // Hooks run during the sanity check too (trainer.sanity_checking() tells), as in Lightning.
  if (is_val) {
    hooks_.on_validation_start(module);
    hooks_.on_validation_epoch_start(module);
  }
  const int64_t n = static_cast<int64_t>(loaders.size());
  for (int64_t d = 0; d < n; ++d) {
    metrics_.set_dataloader(d, n);
    try {
      run_loader(module, *loaders[d], d, is_val, count(*loaders[d]));
    } catch (...) {
      metrics_.set_dataloader(0, 1);
      throw;
    }
  }
  metrics_.set_dataloader(0, 1);
  if (stage == RunningStage::Sanity)
    metrics_.reset_epoch(Metrics::Loop::Eval);  // sanity-check metrics are never logged
  else
    metrics_.finish_epoch(Metrics::Loop::Eval, progress);
  if (is_val) {
    hooks_.on_validation_epoch_end(module);
    hooks_.on_validation_end(module);
  } else {
    hooks_.on_test_epoch_end(module);
  }
  if (was_training) module.train();
  stage_ = saved;
}

void EvaluationLoop::run_loader(LightningModule& module, DataLoader& loader, int64_t d, bool is_val,
                                int64_t max_batches) {
  BatchStream stream = loader.iterate(0);
  for (int64_t i = 0; i < max_batches; ++i) {
    std::optional<Batch> b = data_.next_batch(stream, loader);
    if (!b) break;
    metrics_.set_batch(*b);
    try {
      if (is_val)
        strategy_.validation_step(module, *b, i, d);
      else
        strategy_.test_step(module, *b, i, d);
    } catch (const detail::HookNotImplemented& e) {
      throw ConfigError(std::string("a ") + (is_val ? "validation" : "test") +
                        " dataloader was given but the module does not implement " + e.hook);
    }
    if (is_val) hooks_.on_validation_batch_end(module, *b, i);
  }
}

}  // namespace volt
