#pragma once
/// Optimization: the optimizers configure_optimizers returned and how they step (Lightning's
/// _AutomaticOptimization and _ManualOptimization). Validates the configuration once, before any
/// step; has the Strategy adapt each optimizer (FSDP points it at its shards); steps the
/// optimizer and its scheduler under automatic optimization; serves LightningOptimizer under
/// manual optimization (OptimizationHost).
///
/// [Note: several optimizers]
/// As in Lightning 2.x, several optimizers need manual optimization: the module decides which
/// one steps when. Each parameter belongs to at most one optimizer, so checkpoints keep naming
/// optimizer state by parameter (one optimizer or several, the same files, resharding included),
/// and toggle_optimizer knows whose parameters to freeze. Under manual optimization every
/// LightningOptimizer::step() counts one global step, as Lightning counts them.
///
/// Ownership: owns the Optimizers and the LightningOptimizers; borrows the options, Strategy and
/// hook dispatcher. Valid between configure() and release(). Thread-safety: the training thread.
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "volt/module/lightning_module.h"
#include "volt/strategies/strategy.h"
#include "volt/trainer/hook_dispatcher.h"
#include "volt/trainer/trainer_options.h"

namespace volt {

class Optimization : public OptimizationHost {
 public:
  Optimization(const TrainerOptions& options, Strategy& strategy, HookDispatcher& hooks)
      : options_(options), strategy_(strategy), hooks_(hooks) {}

  /// Calls module.configure_optimizers(), refuses a bad configuration (ConfigError naming what to
  /// change), has the strategy set up each optimizer and hands the module its optimizers.
  void configure(LightningModule& module);
  /// Detaches the module's optimizers() (the optimizers themselves stay, for inspection).
  void release();
  /// Called after each counted optimizer step under manual optimization (the fit loop advances
  /// global_step there).
  void set_step_counter(std::function<void()> count) { count_step_ = std::move(count); }

  bool automatic() const { return module_ == nullptr || module_->automatic_optimization; }
  bool empty() const { return optimizers_.empty(); }
  const Optimizers& optimizers() const { return optimizers_; }
  /// Every optimizer, for checkpoints (empty before configure()).
  OptimizerList optimizer_list() const;

  /// Automatic optimization, at the end of an accumulation window: the module's optimizer_step
  /// (whose closure runs on_before_optimizer_step and configure_gradient_clipping), on_before_zero_grad
  /// and optimizer_zero_grad, then lr_scheduler_step for a step-interval scheduler due after
  /// `global_step` (already advanced) steps. Returns whether the optimizer stepped (16-mixed skips
  /// steps with inf/nan gradients; an optimizer_step override may not step).
  bool automatic_step(LightningModule& module, int64_t global_step, int64_t epoch, int64_t batch_idx);
  /// Automatic optimization, after the epoch's last optimizer step: the epoch-interval schedulers that
  /// need no metric.
  void epoch_end_schedulers(int64_t epoch);
  /// Automatic optimization: schedulers that step with a metric (ReduceLROnPlateau) of `interval`,
  /// with their `monitor` read from `metrics()` (called only when such a scheduler steps); `counter` is the global step
  /// ("step") or the epoch
  /// ("epoch"), for `frequency`. A missing monitor: ConfigError when strict, else a warning.
  using MetricsFn = std::function<const std::map<std::string, double>&()>;
  void plateau_schedulers(SchedulerInterval interval, int64_t counter, const MetricsFn& metrics);

  // ---- OptimizationHost (manual optimization) ---------------------------------------------
  bool step_optimizer(size_t index, const std::function<void()>& closure) override;
  void zero_grad_optimizer(size_t index) override;
  void manual_backward(const torch::Tensor& loss) override;
  void toggle_optimizer(size_t index) override;
  void untoggle_optimizer(size_t index) override;
  double clip_gradients(size_t index, double value, GradientClipAlgorithm algorithm) override;

 private:
  void validate(LightningModule& module);
  /// Refuses what the strategy's steps inside backward could not give exactly (ConfigError).
  void validate_steps_in_backward(LightningModule& module);
  /// Records which module parameters each optimizer holds (before the strategy swaps them for shards).
  void record_ownership(LightningModule& module);
  torch::optim::Optimizer& optimizer(size_t index);

  const TrainerOptions& options_;
  Strategy& strategy_;
  HookDispatcher& hooks_;
  LightningModule* module_ = nullptr;
  Optimizers optimizers_;
  std::vector<std::unique_ptr<LightningOptimizer>> lightning_optimizers_;
  /// The module parameters of each optimizer, by TensorImpl (for toggle_optimizer).
  std::vector<std::vector<torch::Tensor>> owned_;
  /// requires_grad of the parameters toggle_optimizer froze, to restore on untoggle.
  std::unordered_map<c10::TensorImpl*, bool> toggled_;
  std::function<void()> count_step_;
  /// Inside automatic_step: LightningOptimizer::step() is the module's optimizer_step calling it.
  bool in_automatic_step_ = false;
  bool last_stepped_ = false;
};

}  // namespace volt
