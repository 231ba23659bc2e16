#pragma once
/// Callbacks: self-contained additions to training (progress bar, early stopping, checkpointing).
/// Every hook gets the Trainer and the module; callbacks keep their own state and may save it in
/// checkpoints (state_dict / load_state_dict, the Stateful interface), keyed by state_key().
///
/// Ownership: the Trainer holds callbacks as shared_ptrs. Thread-safety: hooks are called from the
/// training thread only.
#include <torch/types.h>
#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "volt/core/stateful.h"
#include "volt/module/data.h"

namespace torch::optim {
class Optimizer;
}

namespace volt {

class Trainer;
class LightningModule;
struct CheckpointMeta;

class Callback : public Stateful {
 public:
  virtual ~Callback() = default;
  /// Identifies this callback's state in a checkpoint (default: its type name). Stateful callbacks
  /// of one Trainer must have distinct keys (a ConfigError at set-up otherwise).
  virtual std::string state_key() const = 0;
  /// Keys earlier volt versions saved this callback's state under, read when a checkpoint has none
  /// under state_key() (Lightning's _legacy_state_key).
  virtual std::vector<std::string> legacy_state_keys() const { return {}; }

  virtual void setup(Trainer&, LightningModule&, const std::string& stage) {}
  virtual void teardown(Trainer&, LightningModule&, const std::string& stage) {}
  virtual void on_fit_start(Trainer&, LightningModule&) {}
  virtual void on_fit_end(Trainer&, LightningModule&) {}
  virtual void on_train_start(Trainer&, LightningModule&) {}
  virtual void on_train_end(Trainer&, LightningModule&) {}
  virtual void on_train_epoch_start(Trainer&, LightningModule&) {}
  virtual void on_train_epoch_end(Trainer&, LightningModule&) {}
  virtual void on_train_batch_start(Trainer&, LightningModule&, const Batch&, int64_t batch_idx) {}
  virtual void on_train_batch_end(Trainer&, LightningModule&, const torch::Tensor& loss, const Batch&,
                                  int64_t batch_idx) {}
  virtual void on_sanity_check_start(Trainer&, LightningModule&) {}
  virtual void on_sanity_check_end(Trainer&, LightningModule&) {}
  virtual void on_validation_start(Trainer&, LightningModule&) {}
  virtual void on_validation_end(Trainer&, LightningModule&) {}
  virtual void on_validation_epoch_start(Trainer&, LightningModule&) {}
  virtual void on_validation_epoch_end(Trainer&, LightningModule&) {}
  virtual void on_validation_batch_start(Trainer&, LightningModule&, const Batch&, int64_t batch_idx) {}
  virtual void on_validation_batch_end(Trainer&, LightningModule&, const Batch&, int64_t batch_idx) {}
  virtual void on_test_start(Trainer&, LightningModule&) {}
  virtual void on_test_end(Trainer&, LightningModule&) {}
  virtual void on_test_epoch_start(Trainer&, LightningModule&) {}
  virtual void on_test_batch_start(Trainer&, LightningModule&, const Batch&, int64_t batch_idx) {}
  virtual void on_test_batch_end(Trainer&, LightningModule&, const Batch&, int64_t batch_idx) {}
  virtual void on_test_epoch_end(Trainer&, LightningModule&) {}
  virtual void on_predict_start(Trainer&, LightningModule&) {}
  virtual void on_predict_epoch_start(Trainer&, LightningModule&) {}
  virtual void on_predict_batch_start(Trainer&, LightningModule&, const Batch&, int64_t batch_idx) {}
  /// `outputs` is what predict_step returned for `batch`; `sample_indices` the dataset indices of
  /// the batch's samples (empty for an iterable dataset).
  virtual void on_predict_batch_end(Trainer&, LightningModule&, const Batch& outputs, const Batch& batch,
                                    const std::vector<int64_t>& sample_indices, int64_t batch_idx,
                                    int64_t dataloader_idx) {}
  virtual void on_predict_epoch_end(Trainer&, LightningModule&) {}
  virtual void on_predict_end(Trainer&, LightningModule&) {}
  virtual void on_before_backward(Trainer&, LightningModule&, const torch::Tensor& loss) {}
  virtual void on_after_backward(Trainer&, LightningModule&) {}
  virtual void on_before_optimizer_step(Trainer&, LightningModule&, torch::optim::Optimizer&) {}
  virtual void on_before_zero_grad(Trainer&, LightningModule&, torch::optim::Optimizer&) {}
  /// Add YAML to checkpoint.extra and this rank's tensors to checkpoint.tensors (see CheckpointMeta).
  virtual void on_save_checkpoint(Trainer&, LightningModule&, CheckpointMeta&) {}
  virtual void on_load_checkpoint(Trainer&, LightningModule&, const CheckpointMeta&) {}
  /// The exception that is about to end fit (for cleanup); the Trainer rethrows it afterwards.
  virtual void on_exception(Trainer&, LightningModule&, const std::exception&) {}

  /// Saved under meta["callbacks"][state_key()] (not with weights_only); empty by default.
  YAML::Node state_dict() const override { return YAML::Node(YAML::NodeType::Map); }
  void load_state_dict(const YAML::Node& state) override {}
};

}  // namespace volt
