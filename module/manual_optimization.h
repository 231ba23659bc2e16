#pragma once
/// Manual optimization (LightningModule::automatic_optimization = false): the module steps its
/// optimizers itself through LightningOptimizer, which routes each call through the running
/// strategy (precision, gradient synchronization, sharded optimizer state), as Lightning's
/// LightningOptimizer does.
///
/// Ownership: LightningOptimizers are owned by the Trainer for the duration of a fit and borrow
/// its OptimizationHost; do not keep them past fit(). Thread-safety: the training thread only.
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <cstddef>
#include <functional>

#include "volt/module/optimizer_config.h"

namespace volt {

/// What a LightningOptimizer needs from the Trainer: implemented by the fit loop, so that the
/// module layer does not depend on the trainer layer.
class OptimizationHost {
 public:
  virtual ~OptimizationHost() = default;
  /// One step of optimizer `index` (precision, inf/nan skip, fused Adam); `closure`, when given,
  /// runs first (it usually computes the loss and calls manual_backward). Counts a global step.
  /// Returns whether the optimizer stepped (16-mixed skips a step with inf/nan gradients).
  virtual bool step_optimizer(size_t index, const std::function<void()>& closure) = 0;
  virtual void zero_grad_optimizer(size_t index) = 0;
  /// Backward of `loss` with the strategy's gradient synchronization and the backward hooks.
  virtual void manual_backward(const torch::Tensor& loss) = 0;
  /// Parameters of the other optimizers stop requiring gradients until untoggle (Lightning's
  /// toggle_optimizer), so a backward for one optimizer leaves the others' gradients alone.
  virtual void toggle_optimizer(size_t index) = 0;
  virtual void untoggle_optimizer(size_t index) = 0;
  /// Clips optimizer `index`'s gradients (across ranks where they are sharded); returns the norm.
  virtual double clip_gradients(size_t index, double value, GradientClipAlgorithm algorithm) = 0;
};

/// One of the module's optimizers under manual optimization (LightningModule::optimizers()).
class LightningOptimizer {
 public:
  LightningOptimizer(torch::optim::Optimizer& optimizer, size_t index, OptimizationHost& host)
      : optimizer_(&optimizer), index_(index), host_(&host) {}

  /// Steps the optimizer as the strategy runs it and advances Trainer::global_step by one (as
  /// Lightning counts each optimizer step under manual optimization). Returns whether it stepped.
  bool step(const std::function<void()>& closure = {}) { return host_->step_optimizer(index_, closure); }
  /// Clears this optimizer's gradients (FSDP: its shards' too).
  void zero_grad() { host_->zero_grad_optimizer(index_); }
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  std::vector<torch::optim::OptimizerParamGroup>& param_groups() { return optimizer_->param_groups(); }
  /// Position in configure_optimizers' list.
  size_t index() const { return index_; }

 private:
  friend class LightningModule;
  torch::optim::Optimizer* optimizer_;
  size_t index_;
  OptimizationHost* host_;
};

}  // namespace volt
