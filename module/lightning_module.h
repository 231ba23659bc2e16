#pragma once
/// The user's model: a torch::nn::Module plus Lightning's hooks. Subclass it, build layers in the
/// constructor or in configure_model(), and implement training_step and configure_optimizers.
///
/// Ownership: the Trainer holds a non-owning pointer to the module during fit/validate/test; the
/// module holds a non-owning back-pointer to the Trainer for that time (`trainer()`).
/// Thread-safety: hooks are called from the training thread only.
#include <torch/nn/module.h>
#include <yaml-cpp/yaml.h>

#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "volt/core/choice.h"
#include "volt/module/data.h"
#include "volt/module/manual_optimization.h"
#include "volt/module/optimizer_config.h"

namespace volt {

class Trainer;
class Callback;

/// How log() reduces a name's values over an epoch (Lightning's reduce_fx): "mean" (weighted by
/// batch size), "sum", "max", "min". "avg" is accepted for "mean", and case is ignored.
enum class ReduceFx { Mean, Sum, Max, Min };
template <>
struct ChoiceNames<ReduceFx> {
  static const std::vector<std::pair<ReduceFx, const char*>>& names() {
    static const std::vector<std::pair<ReduceFx, const char*>> n = {
        {ReduceFx::Mean, "mean"}, {ReduceFx::Sum, "sum"}, {ReduceFx::Max, "max"}, {ReduceFx::Min, "min"}};
    return n;
  }
  static std::string normalize(const std::string& s) {
    std::string l = detail::to_lower(s);
    return l == "avg" ? "mean" : l;
  }
};

/// Options of LightningModule::log, with Lightning's names and defaults. on_step / on_epoch
/// default by stage: training logs per step, validation and test per epoch.
struct LogOptions {
  /// Also show the value in the progress bar (Trainer::progress_bar_metrics).
  bool prog_bar = false;
  std::optional<bool> on_step;
  std::optional<bool> on_epoch;
  /// Reduce the value over ranks before logging, with reduce_fx's operation: the step value at
  /// once, the epoch value when the epoch ends (a "mean" epoch value is the mean over every rank's
  /// samples). Every rank must log the name.
  bool sync_dist = false;
  /// false: the value reaches callback_metrics (and the progress bar) but never the loggers.
  bool logger = true;
  /// The epoch reduction: "mean" (default), "sum", "max" or "min".
  Choice<ReduceFx> reduce_fx = ReduceFx::Mean;
  /// The weight of this value in a "mean" epoch value. Unset: the current batch's size (its first
  /// tensor's first dimension, as Lightning infers it); 1 outside a batch (epoch-end hooks).
  std::optional<int64_t> batch_size;
  /// With several evaluation loaders, append "/dataloader_idx_<i>" to the name (Lightning's
  /// add_dataloader_idx); false: the name is used as given, and the loaders share its value.
  bool add_dataloader_idx = true;
  /// The value is logged by rank 0 only: no reduction over ranks, whatever sync_dist says.
  bool rank_zero_only = false;
};

/// A checkpoint as the hooks see it: metadata (YAML) and tensors the module or callbacks may add in
/// on_save_checkpoint and read back in on_load_checkpoint (Lightning's checkpoint dict).
struct CheckpointMeta {
  YAML::Node extra;  // on_save_checkpoint writes here; on_load_checkpoint reads it back
  /// This rank's tensors (averaged weights, buffers, counters). Every rank must add the same names
  /// with the same shapes and dtypes: the checkpoint keeps each rank's, as it keeps the RNG states,
  /// and on load each rank gets its own back (none, with a warning, from a checkpoint written by
  /// another number of ranks). Prefix names with the owner (e.g. a callback's state_key()).
  std::map<std::string, torch::Tensor> tensors;
};

/// Where LightningModule::log sends its values: the Trainer's metrics while a call runs. An
/// interface so that the module layer does not depend on the Trainer.
class LogSink {
 public:
  virtual ~LogSink() = default;
  virtual void log_metric(const std::string& name, const torch::Tensor& value, const LogOptions& options) = 0;
};

/// What the module asks of the running Trainer besides logging and wrapping: collectives and the
/// rank. An interface so that the module layer does not depend on the Trainer.
class ModuleHost {
 public:
  virtual ~ModuleHost() = default;
  /// `tensor` of every rank stacked on a new first dimension (world size first), on this rank's
  /// device; with sync_grads the result is differentiable with respect to this rank's slice.
  virtual torch::Tensor all_gather(const torch::Tensor& tensor, bool sync_grads) = 0;
  virtual int64_t global_rank() const = 0;
};

/// Where LightningModule::wrap sends a completed module: the running strategy's wrap (the Trainer
/// attaches itself). An interface so that the module layer does not depend on strategies/ or trainer/.
class WrapHost {
 public:
  virtual ~WrapHost() = default;
  /// Makes `module` (a HookedModule, complete) a unit of the strategy now (FSDP shards it).
  virtual void wrap_unit(torch::nn::Module& module) = 0;
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
  /// Declares `module` (a HookedModule: volt::hooked(...) makes one of any module) complete. Call
  /// it in configure_model() as each large layer is built: under strategy "fsdp", when
  /// auto_wrap_policy selects the module (by type or size; a name predicate sees "" here), it
  /// becomes a unit and its parameters are sharded at once, so no rank ever holds the whole model,
  /// only the layers built so far as shards plus the one being built (deferred initialization; the
  /// values are those a single process builds from the same seed). Anywhere else (one device, DDP,
  /// a module the policy does not pick, outside a Trainer) it returns `module` unchanged, so one
  /// configure_model() serves every strategy. Wrap inner modules before the ones holding them.
  template <class M>
  M wrap(M module) {
    wrap_module(*module);
    return module;
  }
  void wrap_module(torch::nn::Module& module);
  /// One optimizer (an OptimizerConfig, or the optimizer alone) or several (a list; they need
  /// manual optimization). Called once per fit, after configure_model().
  virtual Optimizers configure_optimizers() = 0;

  // ---- manual optimization (Lightning's names) -----------------------------------------------
  /// Set to false (in the constructor) to step the optimizers in training_step yourself:
  /// optimizers(), manual_backward(), LightningOptimizer::step() / zero_grad(), lr_schedulers().
  /// The Trainer then neither steps, zeroes, clips nor accumulates; training_step may return an
  /// undefined tensor. Several optimizers require it.
  bool automatic_optimization = true;
  /// The optimizers configure_optimizers returned, in order (during fit only).
  std::vector<LightningOptimizer*> optimizers();
  /// The schedulers configure_optimizers returned, in order (null entries left out; during fit only).
  std::vector<LRScheduler*> lr_schedulers();
  /// Backward of `loss` as the strategy runs it (precision scaling, DDP / FSDP gradient
  /// synchronization) with the on_before_backward / on_after_backward hooks. Call it instead of
  /// loss.backward() under manual optimization.
  void manual_backward(const torch::Tensor& loss);
  /// Only `optimizer`'s parameters require gradients until untoggle_optimizer (the others' flags
  /// are restored then): a backward for one optimizer leaves the others' gradients untouched.
  void toggle_optimizer(LightningOptimizer& optimizer);
  void untoggle_optimizer(LightningOptimizer& optimizer);
  /// Clips `optimizer`'s gradients by total norm or by value (across ranks when sharded); returns
  /// the total norm before clipping. For manual optimization (trainer.gradient_clip_val is automatic).
  double clip_gradients(LightningOptimizer& optimizer, double gradient_clip_val,
                        GradientClipAlgorithm algorithm = GradientClipAlgorithm::Norm);

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

  // ---- optimization hooks (automatic optimization; Lightning's names and order) ----------------
  /// Steps `optimizer` at the end of an accumulation window. The default calls
  /// optimizer.step(optimizer_closure); an override may change the learning rate first (warm-up),
  /// or skip the step by not calling step(). The closure runs on_before_optimizer_step and
  /// configure_gradient_clipping after the strategy unscaled the gradients (16-mixed): call it
  /// through step(), never alone. `epoch` and `batch_idx` are the current epoch and batch.
  /// Trainer::global_step counts the window whether or not the override stepped.
  virtual void optimizer_step(int64_t epoch, int64_t batch_idx, LightningOptimizer& optimizer,
                              const std::function<void()>& optimizer_closure);
  /// Clears the gradients after the step; the default calls optimizer.zero_grad().
  virtual void optimizer_zero_grad(int64_t epoch, int64_t batch_idx, LightningOptimizer& optimizer);
  /// Clips the gradients before the step, with trainer.gradient_clip_val / gradient_clip_algorithm
  /// (unset: no clipping). The default calls clip_gradients(optimizer, val, algorithm) when a value
  /// is set; an override may clip otherwise (call clip_gradients with its own values).
  virtual void configure_gradient_clipping(LightningOptimizer& optimizer, std::optional<double> gradient_clip_val,
                                           GradientClipAlgorithm gradient_clip_algorithm);
  /// Steps a scheduler when its interval and frequency say so; `metric` is the monitored value of a
  /// scheduler that needs one (ReduceLROnPlateau). The default calls scheduler.step(metric) or step().
  virtual void lr_scheduler_step(LRScheduler& scheduler, std::optional<double> metric);
  virtual void on_before_zero_grad(torch::optim::Optimizer& optimizer) {}

  // ---- data (Lightning's names) ---------------------------------------------------------
  /// Runs on global rank 0 only, before setup(), the other ranks waiting (download, tokenize).
  virtual void prepare_data() {}
  /// At the start of fit / validate / test / predict ("fit", "validate", "test", "predict"), on
  /// every rank, before configure_model().
  virtual void setup(const std::string& stage) {}
  /// At the end of the call, after the loops.
  virtual void teardown(const std::string& stage) {}
  /// The batch as the loader gave it, on the host, before it moves to the device.
  virtual Batch on_before_batch_transfer(Batch batch, int64_t dataloader_idx) { return batch; }
  /// Moves `batch` to `device`; the default moves every tensor (asynchronously when pinned).
  virtual Batch transfer_batch_to_device(Batch batch, const torch::Device& device, int64_t dataloader_idx);
  /// The batch on the device, before the step and its batch-start hooks see it.
  virtual Batch on_after_batch_transfer(Batch batch, int64_t dataloader_idx) { return batch; }
  /// Callbacks the module brings: added to the Trainer's at the start of fit / validate / test /
  /// predict; one of the same type as a Trainer callback replaces it (Lightning's rule), and
  /// checkpoint callbacks run last.
  virtual std::vector<std::shared_ptr<Callback>> configure_callbacks() { return {}; }

  // ---- lifecycle hooks (Lightning's names) ------------------------------------------------
  virtual void on_fit_start() {}
  virtual void on_fit_end() {}
  virtual void on_train_start() {}
  virtual void on_train_end() {}
  virtual void on_train_epoch_start() {}
  virtual void on_train_epoch_end() {}
  /// Return -1 to end the epoch here (this batch does not train), as Lightning.
  virtual int on_train_batch_start(const Batch& batch, int64_t batch_idx) { return 0; }
  virtual void on_train_batch_end(const torch::Tensor& loss, const Batch& batch, int64_t batch_idx) {}
  virtual void on_validation_start() {}
  virtual void on_validation_end() {}
  virtual void on_validation_epoch_start() {}
  virtual void on_validation_epoch_end() {}
  virtual void on_validation_batch_start(const Batch& batch, int64_t batch_idx, int64_t dataloader_idx) {}
  virtual void on_validation_batch_end(const Batch& batch, int64_t batch_idx, int64_t dataloader_idx) {}
  /// The model's mode around validation: eval() before, train() after (Lightning's defaults).
  virtual void on_validation_model_eval() { eval(); }
  virtual void on_validation_model_train() { train(); }
  virtual void on_test_start() {}
  virtual void on_test_end() {}
  virtual void on_test_epoch_start() {}
  virtual void on_test_epoch_end() {}
  virtual void on_test_batch_start(const Batch& batch, int64_t batch_idx, int64_t dataloader_idx) {}
  virtual void on_test_batch_end(const Batch& batch, int64_t batch_idx, int64_t dataloader_idx) {}
  virtual void on_predict_start() {}
  virtual void on_predict_epoch_start() {}
  virtual void on_predict_batch_start(const Batch& batch, int64_t batch_idx, int64_t dataloader_idx) {}
  virtual void on_predict_batch_end(const Batch& outputs, const Batch& batch, int64_t batch_idx,
                                    int64_t dataloader_idx) {}
  virtual void on_predict_epoch_end() {}
  virtual void on_predict_end() {}
  virtual void on_before_backward(const torch::Tensor& loss) {}
  virtual void on_after_backward() {}
  virtual void on_before_optimizer_step(torch::optim::Optimizer& optimizer) {}
  /// Add YAML to checkpoint.extra and tensors to checkpoint.tensors; they come back in
  /// on_load_checkpoint (after the weights and every other state are restored).
  virtual void on_save_checkpoint(CheckpointMeta& checkpoint) {}
  virtual void on_load_checkpoint(const CheckpointMeta& checkpoint) {}

  // ---- utilities (Lightning's names) -----------------------------------------------------
  /// Every parameter stops requiring gradients and the module goes to eval mode.
  void freeze();
  /// Every parameter requires gradients again and the module goes to train mode.
  void unfreeze();
  /// `tensor` of every rank stacked on a new first dimension (size world_size, rank order); outside
  /// a Trainer or on one process, tensor.unsqueeze(0). Collective: every rank must call it with the
  /// same shape and dtype. With sync_grads the gradient flows back to this rank's slice.
  torch::Tensor all_gather(const torch::Tensor& tensor, bool sync_grads = false);
  /// Writes its arguments (as operator<< would) and a newline to stdout on global rank 0 only
  /// (everywhere outside a Trainer), as Lightning's self.print.
  template <class... Args>
  void print(const Args&... args) const {
    if (host_ && host_->global_rank() != 0) return;
    std::ostringstream os;
    (os << ... << args);
    std::cout << os.str() << std::endl;
  }

  /// Hyper-parameters saved in checkpoints and in the logger's hparams.yaml.
  virtual YAML::Node hparams() const { return YAML::Node(YAML::NodeType::Map); }

  // ---- logging ----------------------------------------------------------------------------
  /// Logs a one-element tensor (detached and copied; it stays on its device until a row is
  /// written or a metric is read, so logging never waits for the device) or a number. ConfigError
  /// outside fit/validate/test, in predict, for a tensor of several elements, an unknown reduce_fx,
  /// a batch_size <= 0, a name given another reduce_fx earlier in the epoch, or a name colliding
  /// with another's "_step" / "_epoch" name.
  void log(const std::string& name, const torch::Tensor& value, LogOptions options = {});
  void log(const std::string& name, double value, LogOptions options = {});
  /// log() of every entry with the same options (Lightning's log_dict). Every value is checked
  /// first: one that is not a one-element tensor is a ConfigError naming its key, and nothing is
  /// logged.
  void log_dict(const std::map<std::string, torch::Tensor>& values, LogOptions options = {});
  void log_dict(const std::map<std::string, double>& values, LogOptions options = {});

  /// The trainer running this module, or nullptr outside fit/validate/test.
  Trainer* trainer() const { return trainer_; }
  /// Attaches the module to a running Trainer (`trainer`, `sink`, `wrap_host` and `host`
  /// non-owning, all null to detach). Without a wrap host, wrap() checks its module and returns it
  /// unchanged; without a host, all_gather() and print() act as on one process.
  void attach(Trainer* trainer, LogSink* sink, WrapHost* wrap_host = nullptr, ModuleHost* host = nullptr) {
    trainer_ = trainer;
    log_sink_ = sink;
    wrap_host_ = wrap_host;
    host_ = host;
  }
  /// Hands the module its optimizers for manual optimization (non-owning; empty to detach).
  void attach_optimizers(std::vector<LightningOptimizer*> optimizers, std::vector<LRScheduler*> schedulers) {
    optimizers_ = std::move(optimizers);
    schedulers_ = std::move(schedulers);
  }

 private:
  Trainer* trainer_ = nullptr;
  LogSink* log_sink_ = nullptr;
  WrapHost* wrap_host_ = nullptr;
  ModuleHost* host_ = nullptr;
  std::vector<LightningOptimizer*> optimizers_;
  std::vector<LRScheduler*> schedulers_;
  LightningOptimizer& checked(LightningOptimizer& optimizer, const char* what) const;
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
