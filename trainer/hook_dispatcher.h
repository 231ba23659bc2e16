#pragma once
/// HookDispatcher: calls the module's hook and the callbacks' hook for one event, in Lightning 2.x's
/// order: the callbacks (in the order the Trainer holds them), then the module; on_train_epoch_end
/// runs the callbacks that do not monitor metrics, then the module, then the monitoring ones
/// (ModelCheckpoint, EarlyStopping) so they see what the module logged; on_load_checkpoint runs the
/// module first. Events the module has no hook for (on_sanity_check_start/end, on_exception) reach
/// the callbacks only. on_train_batch_start returns the module's answer (-1: end the epoch).
///
/// With a profiler (set_profiler), every hook call is timed under Lightning's names:
/// "[Callback]ModelCheckpoint.on_train_epoch_end", "[LightningModule]MyModel.on_train_epoch_end".
///
/// Ownership: borrows the Trainer (handed to every callback), its callback list, which may grow
/// between calls, and the profiler. Thread-safety: the training thread only.
#include <memory>
#include <string>
#include <vector>

#include "volt/callbacks/callback.h"
#include "volt/module/lightning_module.h"
#include "volt/profiler/profiler.h"

namespace volt {

class HookDispatcher {
 public:
  HookDispatcher(Trainer& trainer, std::vector<std::shared_ptr<Callback>>& callbacks);
  /// Times each hook call on `profiler` (nullptr: none, the default).
  void set_profiler(Profiler* profiler) { profiler_ = profiler; }

  void setup(LightningModule& m, const std::string& stage);
  void teardown(LightningModule& m, const std::string& stage);
  void on_fit_start(LightningModule& m);
  void on_fit_end(LightningModule& m);
  void on_train_start(LightningModule& m);
  void on_train_end(LightningModule& m);
  void on_train_epoch_start(LightningModule& m);
  void on_train_epoch_end(LightningModule& m);
  /// The module's return value: -1 ends the epoch (Lightning's rule).
  int on_train_batch_start(LightningModule& m, const Batch& batch, int64_t batch_idx);
  void on_train_batch_end(LightningModule& m, const torch::Tensor& loss, const Batch& batch, int64_t batch_idx);
  void on_before_backward(LightningModule& m, const torch::Tensor& loss);
  void on_after_backward(LightningModule& m);
  void on_before_optimizer_step(LightningModule& m, torch::optim::Optimizer& optimizer);
  void on_before_zero_grad(LightningModule& m, torch::optim::Optimizer& optimizer);
  void on_sanity_check_start(LightningModule& m);
  void on_sanity_check_end(LightningModule& m);
  void on_validation_start(LightningModule& m);
  void on_validation_epoch_start(LightningModule& m);
  void on_validation_batch_start(LightningModule& m, const Batch& batch, int64_t batch_idx, int64_t dataloader_idx);
  void on_validation_batch_end(LightningModule& m, const Batch& batch, int64_t batch_idx, int64_t dataloader_idx);
  void on_validation_epoch_end(LightningModule& m);
  void on_validation_end(LightningModule& m);
  void on_test_start(LightningModule& m);
  void on_test_epoch_start(LightningModule& m);
  void on_test_batch_start(LightningModule& m, const Batch& batch, int64_t batch_idx, int64_t dataloader_idx);
  void on_test_batch_end(LightningModule& m, const Batch& batch, int64_t batch_idx, int64_t dataloader_idx);
  void on_test_epoch_end(LightningModule& m);
  void on_test_end(LightningModule& m);
  void on_predict_start(LightningModule& m);
  void on_predict_epoch_start(LightningModule& m);
  void on_predict_batch_start(LightningModule& m, const Batch& batch, int64_t batch_idx, int64_t dataloader_idx);
  void on_predict_batch_end(LightningModule& m, const Batch& outputs, const Batch& batch,
                            const std::vector<int64_t>& sample_indices, int64_t batch_idx, int64_t dataloader_idx);
  void on_predict_epoch_end(LightningModule& m);
  void on_predict_end(LightningModule& m);
  void on_save_checkpoint(LightningModule& m, CheckpointMeta& checkpoint);
  void on_load_checkpoint(LightningModule& m, const CheckpointMeta& checkpoint);
  void on_exception(LightningModule& m, const std::exception& e);

 private:
  /// f(callback) for each callback (those `only` accepts, when given), timed as `hook` under a profiler.
  template <class F>
  void callbacks(const char* hook, F&& f, bool (*only)(const Callback&) = nullptr);
  /// f() (the module's `hook`), timed under a profiler.
  template <class F>
  void module_hook(LightningModule& m, const char* hook, F&& f);

  Trainer& trainer_;
  std::vector<std::shared_ptr<Callback>>& callbacks_;
  Profiler* profiler_ = nullptr;
};

}  // namespace volt
