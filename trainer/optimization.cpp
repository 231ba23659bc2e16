// Optimization: configure_optimizers validated and set up; automatic and manual optimizer steps.
#include "volt/trainer/optimization.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <cmath>

#include "volt/core/errors.h"

namespace volt {

void Optimization::configure(LightningModule& module) {
  release();
  module_ = &module;
  optimizers_ = module.configure_optimizers();
  validate(module);
  record_ownership(module);
  if (strategy_.steps_in_backward()) {
    const bool by_value = options_.gradient_clip_val && *options_.gradient_clip_val > 0 &&
                          options_.gradient_clip_algorithm.value() == GradientClipAlgorithm::Value;
    strategy_.set_clip_value_in_backward(by_value ? options_.gradient_clip_val : std::nullopt);
  }
  for (auto& c : optimizers_.configs) strategy_.setup_optimizer(module, c);
  lightning_optimizers_.clear();
  std::vector<LightningOptimizer*> views;
  std::vector<LRScheduler*> schedulers;
  for (size_t i = 0; i < optimizers_.size(); ++i) {
    lightning_optimizers_.push_back(std::make_unique<LightningOptimizer>(*optimizers_[i].optimizer, i, *this));
    views.push_back(lightning_optimizers_.back().get());
    if (optimizers_[i].lr_scheduler) schedulers.push_back(optimizers_[i].lr_scheduler.get());
  }
  module.attach_optimizers(std::move(views), std::move(schedulers));
}

void Optimization::release() {
  // A fit that ended between toggle and untoggle leaves every requires_grad as it found it.
  if (!toggled_.empty() && !optimizers_.empty()) untoggle_optimizer(0);
  if (module_) module_->attach_optimizers({}, {});
}

OptimizerList Optimization::optimizer_list() const {
  OptimizerList out;
  for (const auto& c : optimizers_.configs) out.push_back(c.optimizer.get());
  return out;
}

namespace {
const char* kManualHint =
    "Set automatic_optimization = false in the module's constructor, then step them in training_step with "
    "optimizers(), manual_backward(loss) and LightningOptimizer::step()";
}  // namespace

void Optimization::validate(LightningModule& module) {
  VOLT_CHECK(!optimizers_.empty(), ConfigError, "configure_optimizers() returned no optimizer");
  VOLT_CHECK(optimizers_.size() == 1 || !module.automatic_optimization, ConfigError, "configure_optimizers() returned ",
             optimizers_.size(), " optimizers: several optimizers need manual optimization (as in Lightning 2.x). ",
             kManualHint);
  if (!module.automatic_optimization) {
    VOLT_CHECK(options_.accumulate_grad_batches == 1, ConfigError,
               "config key 'trainer.accumulate_grad_batches': automatic gradient accumulation is not available under "
               "manual optimization; call LightningOptimizer::step() every N batches in training_step instead");
    VOLT_CHECK(!options_.gradient_clip_val || *options_.gradient_clip_val <= 0, ConfigError,
               "config key 'trainer.gradient_clip_val': automatic gradient clipping is not available under manual "
               "optimization; call clip_gradients(optimizer, value) in training_step before the step instead");
  }
  if (strategy_.steps_in_backward()) validate_steps_in_backward(module);
  for (size_t i = 0; i < optimizers_.size(); ++i) {
    const OptimizerConfig& c = optimizers_[i];
    const std::string which =
        optimizers_.size() == 1 ? std::string("configure_optimizers()") : detail::str_cat("optimizer ", i);
    VOLT_CHECK(c.optimizer != nullptr, ConfigError, which, ": no optimizer (a null pointer)");
    VOLT_CHECK(c.interval.is_valid(), ConfigError, which, ": lr scheduler interval must be 'step' or 'epoch', got '",
               c.interval, "'");
    VOLT_CHECK(c.frequency >= 1, ConfigError, which, ": lr scheduler frequency must be >= 1, got ", c.frequency);
    VOLT_CHECK(
        !c.lr_scheduler || !c.lr_scheduler->needs_metric() || !c.monitor.empty() || !module.automatic_optimization,
        ConfigError, which, ": ", c.lr_scheduler ? c.lr_scheduler->name() : std::string(),
        " steps with a metric: set OptimizerConfig::monitor to the name of a logged value (e.g. \"val_loss\")");
    auto& groups = c.optimizer->param_groups();
    for (size_t g = 0; g < groups.size(); ++g) {
      const double lr = groups[g].options().get_lr();
      VOLT_CHECK(std::isfinite(lr) && lr >= 0, ConfigError, which, ": param group ", g, " has lr ", lr,
                 "; the learning rate must be a finite number >= 0");
    }
  }
}

void Optimization::validate_steps_in_backward(LightningModule& module) {
  // Each unit steps as soon as its own gradient is ready: what needs every gradient of the step
  // first cannot give the same result, so it is refused rather than approximated.
  const std::string key = "trainer.strategy.optimizer_in_backward";
  VOLT_CHECK(module.automatic_optimization, ConfigError, "config key '", key,
             "': the optimizer steps inside the Trainer's backward, but this module uses manual optimization "
             "(automatic_optimization = false), where training_step runs backward and steps itself. Turn ",
             key, " off");
  VOLT_CHECK(optimizers_.size() == 1, ConfigError, "config key '", key, "': configure_optimizers() returned ",
             optimizers_.size(), " optimizers; stepping inside backward needs exactly one. Turn ", key, " off");
  VOLT_CHECK(!options_.gradient_clip_val || *options_.gradient_clip_val <= 0 ||
                 options_.gradient_clip_algorithm.value() != GradientClipAlgorithm::Norm,
             ConfigError, "config key 'trainer.gradient_clip_val': clipping by norm cannot run with ", key,
             ": the norm needs every gradient of the step, but each unit steps as soon as its own gradient is "
             "ready. Clip by value (trainer.gradient_clip_algorithm: value; applied to each unit before its step), "
             "or turn ",
             key, " off");
  VOLT_CHECK(strategy_.precision().grad_scaler() == nullptr, ConfigError, "config key 'trainer.precision': '",
             strategy_.precision().name(), "' cannot run with ", key,
             ": its gradient scaler skips the whole step when any gradient is inf/nan, which is known only after "
             "the last unit's gradient, when the other units have stepped. Use bf16-mixed, or turn ",
             key, " off");
}

void Optimization::record_ownership(LightningModule& module) {
  std::unordered_map<const c10::TensorImpl*, std::string> names;
  for (auto& kv : module.named_parameters()) names.emplace(kv.value().unsafeGetTensorImpl(), kv.key());
  std::unordered_map<const c10::TensorImpl*, size_t> owner;
  owned_.assign(optimizers_.size(), {});
  for (size_t i = 0; i < optimizers_.size(); ++i)
    for (auto& g : optimizers_[i].optimizer->param_groups())
      for (auto& p : g.params()) {
        auto [it, fresh] = owner.emplace(p.unsafeGetTensorImpl(), i);
        if (!fresh && it->second == i) continue;  // PyTorch refuses this within one optimizer already
        if (!fresh) {
          auto n = names.find(p.unsafeGetTensorImpl());
          throw ConfigError(detail::str_cat(
              "configure_optimizers(): parameter '", n == names.end() ? std::string("(not the module's)") : n->second,
              "' is in optimizer ", it->second, " and optimizer ", i,
              "; give each parameter to one optimizer (its state could not be saved or stepped unambiguously)"));
        }
        owned_[i].push_back(p);
      }
}

torch::optim::Optimizer& Optimization::optimizer(size_t index) {
  VOLT_CHECK(index < optimizers_.size(), ConfigError, "optimizer index ", index, " out of range (", optimizers_.size(),
             " optimizers)");
  return *optimizers_[index].optimizer;
}

// ---- automatic ------------------------------------------------------------------------------

bool Optimization::automatic_step(LightningModule& module, int64_t global_step, int64_t epoch, int64_t batch_idx) {
  const OptimizerConfig& c = optimizers_[0];
  auto& opt = *c.optimizer;
  LightningOptimizer& lo = *lightning_optimizers_[0];
  // The closure runs inside the precision's step, after 16-mixed unscaled the gradients, so the
  // hooks and clipping see true gradients (Lightning's _after_closure).
  const std::function<void()> closure = [&] {
    hooks_.on_before_optimizer_step(module, opt);
    module.configure_gradient_clipping(lo, options_.gradient_clip_val, options_.gradient_clip_algorithm.value());
  };
  last_stepped_ = false;
  in_automatic_step_ = true;
  try {
    module.optimizer_step(epoch, batch_idx, lo, closure);
  } catch (...) {
    in_automatic_step_ = false;
    throw;
  }
  in_automatic_step_ = false;
  hooks_.on_before_zero_grad(module, opt);
  module.optimizer_zero_grad(epoch, batch_idx, lo);
  if (c.lr_scheduler && !c.lr_scheduler->needs_metric() && c.interval == SchedulerInterval::Step &&
      global_step % c.frequency == 0)
    module.lr_scheduler_step(*c.lr_scheduler, std::nullopt);
  return last_stepped_;
}

void Optimization::epoch_end_schedulers(int64_t epoch) {
  if (!automatic()) return;
  for (auto& c : optimizers_.configs)
    if (c.lr_scheduler && !c.lr_scheduler->needs_metric() && c.interval == SchedulerInterval::Epoch &&
        (epoch + 1) % c.frequency == 0)
      module_->lr_scheduler_step(*c.lr_scheduler, std::nullopt);
}

void Optimization::plateau_schedulers(SchedulerInterval interval, int64_t counter, const MetricsFn& read_metrics) {
  if (!automatic()) return;
  for (auto& c : optimizers_.configs) {
    if (!c.lr_scheduler || !c.lr_scheduler->needs_metric() || c.interval != interval || counter % c.frequency != 0)
      continue;
    const auto& metrics = read_metrics();  // read only when a scheduler needs it (a host sync)
    auto it = metrics.find(c.monitor);
    if (it == metrics.end()) {
      std::string available;
      for (const auto& kv : metrics) available += (available.empty() ? "" : ", ") + kv.first;
      const std::string msg = detail::str_cat(c.lr_scheduler->name(), " conditioned on metric '", c.monitor,
                                              "', which is not available. Available metrics are: [", available,
                                              "]. Set OptimizerConfig::monitor to one of them");
      VOLT_CHECK(!c.strict, ConfigError, msg);
      spdlog::warn("{} (strict is false: the scheduler did not step)", msg);
      continue;
    }
    module_->lr_scheduler_step(*c.lr_scheduler, it->second);
  }
}

// ---- manual -----------------------------------------------------------------------------------

bool Optimization::step_optimizer(size_t index, const std::function<void()>& closure) {
  auto& opt = optimizer(index);
  if (automatic()) {
    // The module's optimizer_step calling step(optimizer_closure): the Trainer counts the step.
    VOLT_CHECK(in_automatic_step_, ConfigError,
               "LightningOptimizer::step() under automatic optimization: the Trainer steps the optimizer (override "
               "optimizer_step to change how). ",
               kManualHint);
    last_stepped_ = strategy_.optimizer_step(
        opt, closure ? closure : [] {});
    return last_stepped_;
  }
  if (closure) closure();
  const bool stepped = strategy_.optimizer_step(opt, [&] { hooks_.on_before_optimizer_step(*module_, opt); });
  if (count_step_) count_step_();
  return stepped;
}

void Optimization::zero_grad_optimizer(size_t index) { strategy_.zero_grad(optimizer(index)); }

void Optimization::manual_backward(const torch::Tensor& loss) {
  VOLT_CHECK(module_ != nullptr, ConfigError, "manual_backward() is available during fit only");
  VOLT_CHECK(!module_->automatic_optimization, ConfigError,
             "manual_backward() under automatic optimization: the Trainer already runs backward on the loss "
             "training_step returns. ",
             kManualHint);
  hooks_.on_before_backward(*module_, loss);
  strategy_.backward(*module_, loss, /*sync_gradients=*/true);
  hooks_.on_after_backward(*module_);
}

void Optimization::toggle_optimizer(size_t index) {
  optimizer(index);  // range check
  // A second toggle without untoggle first restores the flags the first one changed.
  if (!toggled_.empty()) untoggle_optimizer(index);
  std::unordered_set<const c10::TensorImpl*> mine;
  for (const auto& p : owned_[index]) mine.insert(p.unsafeGetTensorImpl());
  for (size_t i = 0; i < owned_.size(); ++i) {
    if (i == index) continue;
    for (auto& p : owned_[i]) {
      if (mine.count(p.unsafeGetTensorImpl())) continue;
      toggled_.emplace(p.unsafeGetTensorImpl(), p.requires_grad());
      p.requires_grad_(false);
    }
  }
}

void Optimization::untoggle_optimizer(size_t index) {
  optimizer(index);
  for (size_t i = 0; i < owned_.size(); ++i)
    for (auto& p : owned_[i]) {
      auto it = toggled_.find(p.unsafeGetTensorImpl());
      if (it != toggled_.end()) p.requires_grad_(it->second);
    }
  toggled_.clear();
}

double Optimization::clip_gradients(size_t index, double value, GradientClipAlgorithm algorithm) {
  auto& opt = optimizer(index);
  VOLT_CHECK(strategy_.supports_gradient_clipping(algorithm), ConfigError, "clip_gradients: strategy '",
             strategy_.name(), "' cannot clip by ", algorithm == GradientClipAlgorithm::Norm ? "norm" : "value");
  return strategy_.clip_gradients(opt, value, algorithm);
}

}  // namespace volt
