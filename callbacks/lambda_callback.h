#pragma once
/// LambdaCallback: a callback made of functions, for C++ users (Lightning's LambdaCallback(on_train_epoch_end=...)).
/// Each hook of Callback has a std::function member of the same name in LambdaCallback::Hooks; the
/// hooks left empty do nothing. For configs, register a Callback class instead.
///
///   LambdaCallback::Hooks h;
///   h.on_train_epoch_end = [&](Trainer& t, LightningModule&) { epochs.push_back(t.current_epoch()); };
///   Trainer trainer(options, {std::make_shared<LambdaCallback>(h)});
///
/// Thread-safety: the functions run on the training thread; what they capture is the caller's.
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "volt/callbacks/callback.h"

namespace volt {

class LambdaCallback : public Callback {
 public:
  /// One function per hook, in Callback's order (the same arguments).
  struct Hooks {
    std::function<void(Trainer&, LightningModule&, const std::string&)> setup;
    std::function<void(Trainer&, LightningModule&, const std::string&)> teardown;
    std::function<void(Trainer&, LightningModule&)> on_fit_start;
    std::function<void(Trainer&, LightningModule&)> on_fit_end;
    std::function<void(Trainer&, LightningModule&)> on_train_start;
    std::function<void(Trainer&, LightningModule&)> on_train_end;
    std::function<void(Trainer&, LightningModule&)> on_train_epoch_start;
    std::function<void(Trainer&, LightningModule&)> on_train_epoch_end;
    std::function<void(Trainer&, LightningModule&, const Batch&, int64_t)> on_train_batch_start;
    std::function<void(Trainer&, LightningModule&, const torch::Tensor&, const Batch&, int64_t)> on_train_batch_end;
    std::function<void(Trainer&, LightningModule&)> on_sanity_check_start;
    std::function<void(Trainer&, LightningModule&)> on_sanity_check_end;
    std::function<void(Trainer&, LightningModule&)> on_validation_start;
    std::function<void(Trainer&, LightningModule&)> on_validation_end;
    std::function<void(Trainer&, LightningModule&)> on_validation_epoch_start;
    std::function<void(Trainer&, LightningModule&)> on_validation_epoch_end;
    std::function<void(Trainer&, LightningModule&, const Batch&, int64_t)> on_validation_batch_start;
    std::function<void(Trainer&, LightningModule&, const Batch&, int64_t)> on_validation_batch_end;
    std::function<void(Trainer&, LightningModule&)> on_test_start;
    std::function<void(Trainer&, LightningModule&)> on_test_end;
    std::function<void(Trainer&, LightningModule&)> on_test_epoch_start;
    std::function<void(Trainer&, LightningModule&, const Batch&, int64_t)> on_test_batch_start;
    std::function<void(Trainer&, LightningModule&, const Batch&, int64_t)> on_test_batch_end;
    std::function<void(Trainer&, LightningModule&)> on_test_epoch_end;
    std::function<void(Trainer&, LightningModule&)> on_predict_start;
    std::function<void(Trainer&, LightningModule&)> on_predict_epoch_start;
    std::function<void(Trainer&, LightningModule&, const Batch&, int64_t)> on_predict_batch_start;
    std::function<void(Trainer&, LightningModule&, const Batch&, const Batch&, const std::vector<int64_t>&, int64_t,
                       int64_t)>
        on_predict_batch_end;
    std::function<void(Trainer&, LightningModule&)> on_predict_epoch_end;
    std::function<void(Trainer&, LightningModule&)> on_predict_end;
    std::function<void(Trainer&, LightningModule&, const torch::Tensor&)> on_before_backward;
    std::function<void(Trainer&, LightningModule&)> on_after_backward;
    std::function<void(Trainer&, LightningModule&, torch::optim::Optimizer&)> on_before_optimizer_step;
    std::function<void(Trainer&, LightningModule&, torch::optim::Optimizer&)> on_before_zero_grad;
    std::function<void(Trainer&, LightningModule&, CheckpointMeta&)> on_save_checkpoint;
    std::function<void(Trainer&, LightningModule&, const CheckpointMeta&)> on_load_checkpoint;
    std::function<void(Trainer&, LightningModule&, const std::exception&)> on_exception;
  };
  /// `state_key` names the callback in checkpoints (set it when several LambdaCallbacks keep state).
  explicit LambdaCallback(Hooks hooks, std::string state_key = "LambdaCallback")
      : hooks_(std::move(hooks)), state_key_(std::move(state_key)) {}
  std::string state_key() const override { return state_key_; }
  const Hooks& hooks() const { return hooks_; }

  void setup(Trainer&, LightningModule&, const std::string& stage) override;
  void teardown(Trainer&, LightningModule&, const std::string& stage) override;
  void on_fit_start(Trainer&, LightningModule&) override;
  void on_fit_end(Trainer&, LightningModule&) override;
  void on_train_start(Trainer&, LightningModule&) override;
  void on_train_end(Trainer&, LightningModule&) override;
  void on_train_epoch_start(Trainer&, LightningModule&) override;
  void on_train_epoch_end(Trainer&, LightningModule&) override;
  void on_train_batch_start(Trainer&, LightningModule&, const Batch&, int64_t batch_idx) override;
  void on_train_batch_end(Trainer&, LightningModule&, const torch::Tensor& loss, const Batch&,
                          int64_t batch_idx) override;
  void on_sanity_check_start(Trainer&, LightningModule&) override;
  void on_sanity_check_end(Trainer&, LightningModule&) override;
  void on_validation_start(Trainer&, LightningModule&) override;
  void on_validation_end(Trainer&, LightningModule&) override;
  void on_validation_epoch_start(Trainer&, LightningModule&) override;
  void on_validation_epoch_end(Trainer&, LightningModule&) override;
  void on_validation_batch_start(Trainer&, LightningModule&, const Batch&, int64_t batch_idx) override;
  void on_validation_batch_end(Trainer&, LightningModule&, const Batch&, int64_t batch_idx) override;
  void on_test_start(Trainer&, LightningModule&) override;
  void on_test_end(Trainer&, LightningModule&) override;
  void on_test_epoch_start(Trainer&, LightningModule&) override;
  void on_test_batch_start(Trainer&, LightningModule&, const Batch&, int64_t batch_idx) override;
  void on_test_batch_end(Trainer&, LightningModule&, const Batch&, int64_t batch_idx) override;
  void on_test_epoch_end(Trainer&, LightningModule&) override;
  void on_predict_start(Trainer&, LightningModule&) override;
  void on_predict_epoch_start(Trainer&, LightningModule&) override;
  void on_predict_batch_start(Trainer&, LightningModule&, const Batch&, int64_t batch_idx) override;
  void on_predict_batch_end(Trainer&, LightningModule&, const Batch& outputs, const Batch& batch,
                            const std::vector<int64_t>& sample_indices, int64_t batch_idx,
                            int64_t dataloader_idx) override;
  void on_predict_epoch_end(Trainer&, LightningModule&) override;
  void on_predict_end(Trainer&, LightningModule&) override;
  void on_before_backward(Trainer&, LightningModule&, const torch::Tensor& loss) override;
  void on_after_backward(Trainer&, LightningModule&) override;
  void on_before_optimizer_step(Trainer&, LightningModule&, torch::optim::Optimizer&) override;
  void on_before_zero_grad(Trainer&, LightningModule&, torch::optim::Optimizer&) override;
  void on_save_checkpoint(Trainer&, LightningModule&, CheckpointMeta&) override;
  void on_load_checkpoint(Trainer&, LightningModule&, const CheckpointMeta&) override;
  void on_exception(Trainer&, LightningModule&, const std::exception&) override;

 private:
  Hooks hooks_;
  std::string state_key_;
};

}  // namespace volt
