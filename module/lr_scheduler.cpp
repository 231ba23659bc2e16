#include "volt/module/lr_scheduler.h"

#include <cmath>

#include "volt/core/errors.h"

namespace volt {

LRScheduler::LRScheduler(torch::optim::Optimizer& optimizer) : optimizer_(&optimizer) {
  for (auto& g : optimizer_->param_groups()) base_lrs_.push_back(g.options().get_lr());
}

void LRScheduler::apply() {
  auto& groups = optimizer_->param_groups();
  for (size_t i = 0; i < groups.size() && i < base_lrs_.size(); ++i)
    groups[i].options().set_lr(base_lrs_[i] * factor(last_epoch_));
}

void LRScheduler::step() {
  ++last_epoch_;
  apply();
}

void LRScheduler::set_last_epoch(int64_t e) {
  last_epoch_ = e;
  apply();
}

std::vector<double> LRScheduler::current_lrs() const {
  std::vector<double> out;
  for (auto& g : optimizer_->param_groups()) out.push_back(g.options().get_lr());
  return out;
}

StepLR::StepLR(torch::optim::Optimizer& opt, int64_t step_size, double gamma)
    : LRScheduler(opt), step_size_(step_size), gamma_(gamma) {
  VOLT_CHECK(step_size > 0, ConfigError, "StepLR: step_size must be > 0, got ", step_size);
  set_last_epoch(0);
}
double StepLR::factor(int64_t epoch) const { return std::pow(gamma_, static_cast<double>(epoch / step_size_)); }

LambdaLR::LambdaLR(torch::optim::Optimizer& opt, std::function<double(int64_t)> fn)
    : LRScheduler(opt), fn_(std::move(fn)) {
  VOLT_CHECK(static_cast<bool>(fn_), ConfigError, "LambdaLR: empty function");
  set_last_epoch(0);  // PyTorch applies fn(0) at construction (warm-up starts low)
}

CosineAnnealingLR::CosineAnnealingLR(torch::optim::Optimizer& opt, int64_t t_max, double eta_min_factor)
    : LRScheduler(opt), t_max_(t_max), eta_min_factor_(eta_min_factor) {
  VOLT_CHECK(t_max > 0, ConfigError, "CosineAnnealingLR: t_max must be > 0, got ", t_max);
  set_last_epoch(0);
}
double CosineAnnealingLR::factor(int64_t epoch) const {
  const double t = static_cast<double>(std::min(epoch, t_max_)) / static_cast<double>(t_max_);
  return eta_min_factor_ + (1.0 - eta_min_factor_) * 0.5 * (1.0 + std::cos(M_PI * t));
}

}  // namespace volt
