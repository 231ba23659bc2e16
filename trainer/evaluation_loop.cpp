// EvaluationLoop: the validation / test epoch, with its hooks and epoch metrics.
#include "volt/trainer/evaluation_loop.h"

#include <torch/torch.h>

#include <csignal>
#include <optional>

#include "volt/core/errors.h"
#include "volt/core/signals.h"

namespace volt {

namespace {
/// SIGINT or SIGTERM received by some rank during fit's validation or sanity check: thrown by
/// run_loader, turned into a TrainingError naming the step by run().
struct StopRequested {
  int signal;
  int64_t rank, batch;
};

/// Every rank's view of the stop signals, agreed before each validation batch of fit (one
/// all-reduce), so validation stops at the next batch as training stops at the next step. The
/// requeue signal is left to the fit loop (it saves after a whole step).
void check_stop(Strategy& strategy, int64_t batch) {
  if (!detail::StopSignals::active()) return;  // validate / test: no guard, the default action
  const int local = detail::StopSignals::requested();
  const bool stop = local == SIGINT || local == SIGTERM;
  const int64_t world = strategy.world_size(), rank = strategy.global_rank();
  double who = stop ? static_cast<double>(rank) : static_cast<double>(world), sig = stop ? -local : 0;
  if (world > 1) {
    const torch::Tensor t = strategy.all_reduce(torch::tensor({who, sig}, torch::kDouble), ReduceOp::Min);
    who = t[0].item<double>();
    sig = t[1].item<double>();
  }
  if (who < static_cast<double>(world)) throw StopRequested{static_cast<int>(-sig), static_cast<int64_t>(who), batch};
}
}  // namespace

// [Note: inference mode]
// trainer.inference_mode (Lightning's default true) runs evaluation under InferenceMode, which skips
// autograd's version counters as well as the graph. Tensors created there can never be written
// outside it, so the Trainer turns it off where evaluation creates state that training writes
// later: FSDP's gathered-parameter buffers, and collectives on Gloo (Lightning too uses no_grad
// with Gloo). Elsewhere a module that caches a tensor in its first forward should create it in the
// constructor or in configure_model, or set inference_mode: false.
void EvaluationLoop::run(LightningModule& module, const std::vector<DataLoader*>& loaders, RunningStage stage,
                         const BatchCount& count, const FitProgress& progress, bool* pending) {
  const RunningStage saved = stage_;
  const bool sanity = stage == RunningStage::Sanity;
  stage_ = stage;  // trainer.sanity_checking() is true in on_sanity_check_start/end, as in Lightning
  if (sanity) hooks_.on_sanity_check_start(module);
  auto scope = profile(strategy_.profiler(), stage == RunningStage::Test     ? "run_test"
                                             : stage == RunningStage::Sanity ? "run_sanity_check"
                                                                             : "run_validation");
  const bool was_training = module.is_training();
  const bool is_val = stage != RunningStage::Test;
  if (is_val)
    module.on_validation_model_eval();
  else
    module.eval();
  std::optional<c10::InferenceMode> inference;
  std::optional<torch::NoGradGuard> no_grad;
  if (inference_mode_)
    inference.emplace();
  else
    no_grad.emplace();
  auto restore_mode = [&] {
    if (!was_training) return;
    if (is_val)
      module.on_validation_model_train();
    else
      module.train();
  };
  // Hooks run during the sanity check too (trainer.sanity_checking() tells), as in Lightning.
  if (is_val) {
    hooks_.on_validation_start(module);
    hooks_.on_validation_epoch_start(module);
  } else {
    hooks_.on_test_start(module);
    hooks_.on_test_epoch_start(module);
  }
  const int64_t n = static_cast<int64_t>(loaders.size());
  for (int64_t d = 0; d < n; ++d) {
    metrics_.set_dataloader(d, n);
    try {
      run_loader(module, *loaders[d], d, is_val, count(*loaders[d]));
    } catch (const StopRequested& s) {
      metrics_.set_dataloader(0, 1);
      restore_mode();
      stage_ = saved;
      throw TrainingError(detail::str_cat(
          "stopped by ", s.signal == SIGINT ? "SIGINT" : "SIGTERM", " (received by rank ", s.rank, ") during ",
          stage == RunningStage::Sanity ? "the sanity check" : "validation", " at step ", progress.global_step,
          " (validation batch ", s.batch, n > 1 ? detail::str_cat(" of dataloader ", d) : std::string(),
          "); the checkpoints already written are kept: resume with ckpt_path=last"));
    } catch (...) {
      metrics_.set_dataloader(0, 1);
      throw;
    }
  }
  metrics_.set_dataloader(0, 1);
  // Lightning's order: the epoch-end hooks may log (an epoch value computed from the whole epoch),
  // so the epoch's metrics are reduced after them, and on_validation_end sees the result.
  if (is_val)
    hooks_.on_validation_epoch_end(module);
  else
    hooks_.on_test_epoch_end(module);
  if (stage == RunningStage::Sanity)
    metrics_.reset_epoch(Metrics::Loop::Eval);  // sanity-check metrics are never logged
  else
    metrics_.finish_epoch(Metrics::Loop::Eval, progress);
  if (pending) *pending = false;
  if (is_val)
    hooks_.on_validation_end(module);
  else
    hooks_.on_test_end(module);
  restore_mode();
  if (sanity) hooks_.on_sanity_check_end(module);
  stage_ = saved;
}

void EvaluationLoop::run_loader(LightningModule& module, DataLoader& loader, int64_t d, bool is_val,
                                int64_t max_batches) {
  // [Note: every sample once] A map-style loader is not padded under several ranks (the Trainer
  // attaches it unpadded, as for predict), so no sample is counted twice in the epoch means; the
  // ranks' shares differ by at most one batch. Every rank runs the longest count, a rank that ran
  // out on a stand-in batch whose logged values are discarded (its forward may be collective).
  const bool uneven = strategy_.world_size() > 1 && !loader.is_iterable();
  if (uneven)
    max_batches = static_cast<int64_t>(
        strategy_.all_reduce(torch::tensor({static_cast<double>(max_batches)}, torch::kDouble), ReduceOp::Max)
            .item<double>());
  BatchStream stream = loader.iterate(0);
  std::optional<Batch> last;
  for (int64_t i = 0; i < max_batches; ++i) {
    if (is_val) check_stop(strategy_, i);
    std::optional<Batch> b = uneven ? stream.next() : data_.next_batch(stream, loader);
    bool stand_in = false;
    if (uneven) {
      const auto any = strategy_.all_reduce(torch::tensor({b ? 1.0 : 0.0}, torch::kDouble), ReduceOp::Max);
      if (any.item<double>() == 0.0) break;
      if (!b) {
        if (!last && loader.dataset().size() > 0) {
          std::vector<Batch> one{loader.dataset().get(0)};
          last = loader.options().collate_fn ? loader.options().collate_fn(std::move(one)) : collate(std::move(one));
        }
        VOLT_CHECK(last.has_value(), ConfigError, "rank ", strategy_.global_rank(), " has no sample of ",
                   is_val ? "validation" : "test", " dataloader ", d, " while other ranks do");
        b = last;
        stand_in = true;
      }
    }
    if (!b) break;
    const Batch db = strategy_.batch_to_device(module, *b, d);
    metrics_.set_batch(db);
    metrics_.set_discard(stand_in);
    if (!stand_in) {
      if (is_val)
        hooks_.on_validation_batch_start(module, db, i, d);
      else
        hooks_.on_test_batch_start(module, db, i, d);
    }
    try {
      if (is_val)
        strategy_.validation_step(module, db, i, d);
      else
        strategy_.test_step(module, db, i, d);
    } catch (const detail::HookNotImplemented& e) {
      metrics_.set_discard(false);
      throw ConfigError(std::string("a ") + (is_val ? "validation" : "test") +
                        " dataloader was given but the module does not implement " + e.hook);
    } catch (...) {
      metrics_.set_discard(false);
      throw;
    }
    metrics_.set_discard(false);
    if (stand_in) continue;
    if (is_val)
      hooks_.on_validation_batch_end(module, db, i, d);
    else
      hooks_.on_test_batch_end(module, db, i, d);
    last = std::move(b);
  }
}

}  // namespace volt
