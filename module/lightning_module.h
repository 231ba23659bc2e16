#pragma once
/// The user's model: a torch::nn::Module plus Lightning's hooks. Subclass it, build layers in the
/// constructor or in configure_model(), and implement training_step and configure_optimizers.
///
/// Ownership: the Trainer holds a non-owning pointer to the module during fit/validate/test; the
/// module holds a non-owning back-pointer to the Trainer for that time (`trainer()`).
/// Thread-safety: hooks are called from the training thread only.
#include <torch/nn/module.h>
#include <yaml-cpp/yaml.h>

#include <map>
#include <optional>
#include <string>

#include "volt/module/data.h"
#include "volt/module/lr_scheduler.h"

namespace volt {

class Trainer;

/// Options of LightningModule::log, with Lightning's names and defaults. on_step / on_epoch
/// default by stage: training logs per step, validation and test per epoch.
struct LogOptions {
  bool prog_bar = false;
  std::optional<bool> on_step;
  std::optional<bool> on_epoch;
  /// Average the value over ranks (an all-reduce) before logging.
  bool sync_dist = false;
  bool logger = true;
};

/// A checkpoint as the hooks see it: metadata (YAML) the module or callbacks may extend.
struct CheckpointMeta {
  YAML::Node extra;  // on_save_checkpoint writes here; on_load_checkpoint reads it back
};

/// Where LightningModule::log sends its values: the Trainer's metrics while a call runs. An
/// interface so that the module layer does not depend on the Trainer.
class LogSink {
 public:
  virtual ~LogSink() = default;
  virtual void log_metric(const std::string& name, const torch::Tensor& value, const LogOptions& options) = 0;
};

class LightningModule : public torch::nn::Module {
 public:
  LightningModule() = default;
  explicit LightningModule(const std::string& name) : torch::nn::Module(name) {}
  ~LightningModule() override = default;

  // ---- model and optimization --------------------------------------------------------------
  /// Build layers here when they should be created only once the strategy is known (large models).
  /// Called once per fit/validate/test before the strategy sets the model up; must be idempotent.
  virtual void configure_model() {}
  virtual OptimizerConfig configure_optimizers() = 0;

  // ---- steps -----------------------------------------------------------------------------
  /// Returns the loss to minimize.
  virtual torch::Tensor training_step(const Batch& batch, int64_t batch_idx) = 0;
  virtual void validation_step(const Batch& batch, int64_t batch_idx);
  virtual void test_step(const Batch& batch, int64_t batch_idx);
  /// With several validation / test loaders, override these to know which one a batch came from
  /// (Lightning's dataloader_idx). The defaults call the two-argument steps.
  virtual void validation_step(const Batch& batch, int64_t batch_idx, int64_t dataloader_idx);
  virtual void test_step(const Batch& batch, int64_t batch_idx, int64_t dataloader_idx);
  /// Trainer::predict's step: returns the prediction for `batch` (any tensors, named or nested).
  /// Runs in eval mode without gradients; log() is not available here, as in Lightning.
  virtual Batch predict_step(const Batch& batch, int64_t batch_idx);
  virtual Batch predict_step(const Batch& batch, int64_t batch_idx, int64_t dataloader_idx);

  // ---- lifecycle hooks (Lightning's names) ------------------------------------------------
  virtual void on_fit_start() {}
  virtual void on_fit_end() {}
  virtual void on_train_start() {}
  virtual void on_train_end() {}
  virtual void on_train_epoch_start() {}
  virtual void on_train_epoch_end() {}
  virtual void on_train_batch_start(const Batch& batch, int64_t batch_idx) {}
  virtual void on_train_batch_end(const torch::Tensor& loss, const Batch& batch, int64_t batch_idx) {}
  virtual void on_validation_epoch_start() {}
  virtual void on_validation_epoch_end() {}
  virtual void on_test_epoch_end() {}
  virtual void on_predict_start() {}
  virtual void on_predict_epoch_end() {}
  virtual void on_predict_end() {}
  virtual void on_before_backward(const torch::Tensor& loss) {}
  virtual void on_after_backward() {}
  virtual void on_before_optimizer_step(torch::optim::Optimizer& optimizer) {}
  virtual void on_save_checkpoint(CheckpointMeta& checkpoint) {}
  virtual void on_load_checkpoint(const CheckpointMeta& checkpoint) {}

  /// Hyper-parameters saved in checkpoints and in the logger's hparams.yaml.
  virtual YAML::Node hparams() const { return YAML::Node(YAML::NodeType::Map); }

  // ---- logging ----------------------------------------------------------------------------
  void log(const std::string& name, const torch::Tensor& value, LogOptions options = {});
  void log(const std::string& name, double value, LogOptions options = {});

  /// The trainer running this module, or nullptr outside fit/validate/test.
  Trainer* trainer() const { return trainer_; }
  /// Attaches the module to a running Trainer (`trainer` and `sink` non-owning, both null to detach).
  void attach(Trainer* trainer, LogSink* sink) {
    trainer_ = trainer;
    log_sink_ = sink;
  }

 private:
  Trainer* trainer_ = nullptr;
  LogSink* log_sink_ = nullptr;
};

namespace detail {
/// Thrown by the default validation_step/test_step so the Trainer can say which hook is missing.
struct HookNotImplemented : std::exception {
  const char* hook;
  explicit HookNotImplemented(const char* h) : hook(h) {}
  const char* what() const noexcept override { return hook; }
};
}  // namespace detail

}  // namespace volt
