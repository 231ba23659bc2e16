#include "volt/strategies/grad_scaler.h"

#include <torch/torch.h>

#include "volt/core/errors.h"

namespace volt {

GradScaler::GradScaler(GradScalerOptions options, std::function<bool(bool)> any_rank)
    : options_(options), any_rank_(std::move(any_rank)), scale_(options.init_scale) {
  VOLT_CHECK(options_.init_scale > 0 && options_.growth_factor > 1 && options_.backoff_factor > 0 &&
                 options_.backoff_factor < 1 && options_.growth_interval > 0,
             ConfigError,
             "GradScaler: need init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1, growth_interval > 0");
}

torch::Tensor GradScaler::scale_loss(const torch::Tensor& loss) const { return loss * scale_; }

void GradScaler::unscale(torch::optim::Optimizer& optimizer) {
  if (unscaled_) return;
  torch::NoGradGuard ng;
  const double inv = 1.0 / scale_;
  // One flag on the device, one host sync for the whole step.
  std::vector<torch::Tensor> bad;
  for (auto& g : optimizer.param_groups())
    for (auto& p : g.params()) {
      if (!p.grad().defined()) continue;
      auto& grad = p.mutable_grad();
      grad.mul_(inv);
      bad.push_back(grad.isfinite().logical_not().any());
    }
  const bool local = !bad.empty() && torch::stack(bad).any().item<bool>();
  found_inf_ = any_rank_(local);
  unscaled_ = true;
}

bool GradScaler::step(torch::optim::Optimizer& optimizer, const std::function<void()>& optimizer_step) {
  unscale(optimizer);
  const bool stepped = !found_inf_;
  if (stepped) optimizer_step();
  update();
  return stepped;
}

void GradScaler::update() {
  if (found_inf_) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    growth_tracker_ = 0;
  }
  unscaled_ = false;
  found_inf_ = false;
}

YAML::Node GradScaler::state_dict() const {
  YAML::Node n(YAML::NodeType::Map);
  n["scale"] = scale_;
  n["growth_factor"] = options_.growth_factor;
  n["backoff_factor"] = options_.backoff_factor;
  n["growth_interval"] = options_.growth_interval;
  n["_growth_tracker"] = growth_tracker_;
  return n;
}

void GradScaler::load_state_dict(const YAML::Node& s) {
  if (s["scale"]) scale_ = s["scale"].as<double>();
  if (s["_growth_tracker"]) growth_tracker_ = s["_growth_tracker"].as<int64_t>();
}

}  // namespace volt
