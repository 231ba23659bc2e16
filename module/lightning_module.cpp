#include "volt/module/lightning_module.h"

#include <algorithm>
#include <cmath>

#include "volt/core/errors.h"
#include "volt/core/hooked_module.h"

namespace volt {

void LightningModule::validation_step(const Batch&, int64_t) { throw detail::HookNotImplemented("validation_step"); }
void LightningModule::test_step(const Batch&, int64_t) { throw detail::HookNotImplemented("test_step"); }
Batch LightningModule::predict_step(const Batch&, int64_t) { throw detail::HookNotImplemented("predict_step"); }

void LightningModule::validation_step(const Batch& batch, int64_t batch_idx, int64_t) {
  validation_step(batch, batch_idx);
}
void LightningModule::test_step(const Batch& batch, int64_t batch_idx, int64_t) { test_step(batch, batch_idx); }
Batch LightningModule::predict_step(const Batch& batch, int64_t batch_idx, int64_t) {
  return predict_step(batch, batch_idx);
}

std::vector<LightningOptimizer*> LightningModule::optimizers() {
  VOLT_CHECK(!optimizers_.empty(), ConfigError,
             "optimizers() is available during fit only (after configure_optimizers, from training_step and the "
             "training hooks)");
  return optimizers_;
}

std::vector<LRScheduler*> LightningModule::lr_schedulers() {
  VOLT_CHECK(!optimizers_.empty(), ConfigError, "lr_schedulers() is available during fit only");
  return schedulers_;
}

LightningOptimizer& LightningModule::checked(LightningOptimizer& optimizer, const char* what) const {
  const bool ours = std::find(optimizers_.begin(), optimizers_.end(), &optimizer) != optimizers_.end();
  VOLT_CHECK(ours, ConfigError, what,
             ": the optimizer is not one of this module's optimizers() in the running fit (call it during fit, "
             "with an element of optimizers())");
  return optimizer;
}

void LightningModule::manual_backward(const torch::Tensor& loss) {
  VOLT_CHECK(!optimizers_.empty(), ConfigError, "manual_backward() is available during fit only");
  VOLT_CHECK(loss.defined() && loss.numel() == 1, ConfigError,
             "manual_backward(loss): the loss must be a scalar tensor, got ",
             loss.defined() ? detail::str_cat("shape ", loss.sizes()) : std::string("an undefined tensor"));
  optimizers_.front()->host_->manual_backward(loss);
}

void LightningModule::toggle_optimizer(LightningOptimizer& optimizer) {
  checked(optimizer, "toggle_optimizer").host_->toggle_optimizer(optimizer.index());
}

void LightningModule::untoggle_optimizer(LightningOptimizer& optimizer) {
  checked(optimizer, "untoggle_optimizer").host_->untoggle_optimizer(optimizer.index());
}

double LightningModule::clip_gradients(LightningOptimizer& optimizer, double value, GradientClipAlgorithm algorithm) {
  VOLT_CHECK(value > 0 && std::isfinite(value), ConfigError,
             "clip_gradients: gradient_clip_val must be finite and > 0, got ", value);
  return checked(optimizer, "clip_gradients").host_->clip_gradients(optimizer.index(), value, algorithm);
}

void LightningModule::log(const std::string& name, const torch::Tensor& value, LogOptions options) {
  VOLT_CHECK(log_sink_ != nullptr, ConfigError, "log('", name, "') called outside fit/validate/test");
  log_sink_->log_metric(name, value, options);
}

void LightningModule::log(const std::string& name, double value, LogOptions options) {
  log(name, torch::tensor(value, torch::kDouble), options);
}

void LightningModule::log_dict(const std::map<std::string, torch::Tensor>& values, LogOptions options) {
  VOLT_CHECK(log_sink_ != nullptr, ConfigError, "log_dict() called outside fit/validate/test");
  for (const auto& [name, value] : values)
    VOLT_CHECK(value.defined() && value.numel() == 1, ConfigError, "log_dict: the value of '", name,
               "' must be a one-element tensor, got ",
               value.defined() ? detail::str_cat("shape ", value.sizes()) : std::string("an undefined tensor"),
               "; log a reduction of it (e.g. its mean) or one key per element. Nothing was logged");
  for (const auto& [name, value] : values) log_sink_->log_metric(name, value, options);
}

void LightningModule::log_dict(const std::map<std::string, double>& values, LogOptions options) {
  VOLT_CHECK(log_sink_ != nullptr, ConfigError, "log_dict() called outside fit/validate/test");
  for (const auto& [name, value] : values) log(name, value, options);
}

void LightningModule::optimizer_step(int64_t, int64_t, LightningOptimizer& optimizer,
                                     const std::function<void()>& optimizer_closure) {
  optimizer.step(optimizer_closure);
}

void LightningModule::optimizer_zero_grad(int64_t, int64_t, LightningOptimizer& optimizer) { optimizer.zero_grad(); }

void LightningModule::configure_gradient_clipping(LightningOptimizer& optimizer, std::optional<double> value,
                                                  GradientClipAlgorithm algorithm) {
  if (value && *value > 0) clip_gradients(optimizer, *value, algorithm);
}

void LightningModule::lr_scheduler_step(LRScheduler& scheduler, std::optional<double> metric) {
  if (metric)
    scheduler.step(*metric);
  else
    scheduler.step();
}

Batch LightningModule::transfer_batch_to_device(Batch batch, const torch::Device& device, int64_t) {
  if (device.is_cpu()) return batch;
  // Pinned host memory lets the copy run asynchronously.
  return batch.map([&](const torch::Tensor& t) { return t.to(device, /*non_blocking=*/t.is_pinned()); });
}

void LightningModule::freeze() {
  for (auto& p : parameters()) p.requires_grad_(false);
  eval();
}

void LightningModule::unfreeze() {
  for (auto& p : parameters()) p.requires_grad_(true);
  train();
}

torch::Tensor LightningModule::all_gather(const torch::Tensor& tensor, bool sync_grads) {
  VOLT_CHECK(tensor.defined(), ConfigError, "all_gather: the tensor is undefined");
  if (!host_) return tensor.unsqueeze(0);
  return host_->all_gather(tensor, sync_grads);
}

void LightningModule::wrap_module(torch::nn::Module& module) {
  VOLT_CHECK(is_hooked(module), ConfigError, "wrap(): '", module.name(),
             "' is not a volt::HookedModule, so no strategy can act around its forward; wrap it as "
             "volt::hooked(module) (core/hooked_wrapper.h) or derive it from HookedModule");
  if (wrap_host_) wrap_host_->wrap_unit(module);
}

}  // namespace volt
