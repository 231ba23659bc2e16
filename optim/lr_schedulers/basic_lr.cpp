// The formulas are PyTorch 1.13's get_lr() / _get_closed_form_lr(), operation for operation, so the
// lrs agree with Python's to the last bit where the C library's pow/cos do.
#include "volt/optim/lr_schedulers/basic_lr.h"

#include <algorithm>
#include <cmath>

#include "volt/core/errors.h"

namespace volt {

StepLR::StepLR(torch::optim::Optimizer& opt, int64_t step_size, double gamma)
    : LRScheduler(opt), step_size_(step_size), gamma_(gamma) {
  VOLT_CHECK(step_size > 0, ConfigError, "StepLR: step_size must be > 0, got ", step_size);
  initial_step();
}

std::vector<double> StepLR::get_lr() {
  std::vector<double> lrs = current_lrs();
  if (last_epoch_ == 0 || last_epoch_ % step_size_ != 0) return lrs;
  for (double& lr : lrs) lr *= gamma_;
  return lrs;
}

std::vector<double> StepLR::closed_form_lr() {
  std::vector<double> lrs;
  for (double base : base_lrs_) lrs.push_back(base * std::pow(gamma_, static_cast<double>(last_epoch_ / step_size_)));
  return lrs;
}

MultiStepLR::MultiStepLR(torch::optim::Optimizer& opt, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(opt), gamma_(gamma) {
  for (int64_t m : milestones) {
    VOLT_CHECK(m >= 0, ConfigError, "MultiStepLR: milestones must be >= 0, got ", m);
    ++milestones_[m];
  }
  initial_step();
}

std::vector<double> MultiStepLR::get_lr() {
  std::vector<double> lrs = current_lrs();
  auto it = milestones_.find(last_epoch_);
  if (it == milestones_.end()) return lrs;
  for (double& lr : lrs) lr *= std::pow(gamma_, static_cast<double>(it->second));
  return lrs;
}

std::vector<double> MultiStepLR::closed_form_lr() {
  int64_t passed = 0;  // bisect_right over the sorted milestones, repeats counted
  for (const auto& [m, count] : milestones_)
    if (m <= last_epoch_) passed += count;
  std::vector<double> lrs;
  for (double base : base_lrs_) lrs.push_back(base * std::pow(gamma_, static_cast<double>(passed)));
  return lrs;
}

ExponentialLR::ExponentialLR(torch::optim::Optimizer& opt, double gamma) : LRScheduler(opt), gamma_(gamma) {
  VOLT_CHECK(std::isfinite(gamma), ConfigError, "ExponentialLR: gamma must be finite, got ", gamma);
  initial_step();
}

std::vector<double> ExponentialLR::get_lr() {
  std::vector<double> lrs = current_lrs();
  if (last_epoch_ == 0) return lrs;
  for (double& lr : lrs) lr *= gamma_;
  return lrs;
}

std::vector<double> ExponentialLR::closed_form_lr() {
  std::vector<double> lrs;
  for (double base : base_lrs_) lrs.push_back(base * std::pow(gamma_, static_cast<double>(last_epoch_)));
  return lrs;
}

LinearLR::LinearLR(torch::optim::Optimizer& opt, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(opt), start_factor_(start_factor), end_factor_(end_factor), total_iters_(total_iters) {
  // start_factor 0 would divide by zero at step 1 (PyTorch raises ZeroDivisionError there).
  VOLT_CHECK(start_factor > 0.0 && start_factor <= 1.0, ConfigError, "LinearLR: start_factor must be in (0, 1], got ",
             start_factor);
  VOLT_CHECK(end_factor >= 0.0 && end_factor <= 1.0, ConfigError, "LinearLR: end_factor must be in [0, 1], got ",
             end_factor);
  VOLT_CHECK(total_iters > 0, ConfigError, "LinearLR: total_iters must be > 0, got ", total_iters);
  initial_step();
}

std::vector<double> LinearLR::get_lr() {
  std::vector<double> lrs = current_lrs();
  if (last_epoch_ == 0) {
    for (double& lr : lrs) lr *= start_factor_;
    return lrs;
  }
  if (last_epoch_ > total_iters_) return lrs;
  const double delta = end_factor_ - start_factor_;
  const double f =
      1. + delta / (static_cast<double>(total_iters_) * start_factor_ + static_cast<double>(last_epoch_ - 1) * delta);
  for (double& lr : lrs) lr *= f;
  return lrs;
}

std::vector<double> LinearLR::closed_form_lr() {
  const double done = static_cast<double>(std::min(total_iters_, last_epoch_));
  std::vector<double> lrs;
  for (double base : base_lrs_)
    lrs.push_back(base * (start_factor_ + (end_factor_ - start_factor_) * done / static_cast<double>(total_iters_)));
  return lrs;
}

LambdaLR::LambdaLR(torch::optim::Optimizer& opt, Lambda lr_lambda)
    : LambdaLR(opt, std::vector<Lambda>(opt.param_groups().size(), lr_lambda)) {}

LambdaLR::LambdaLR(torch::optim::Optimizer& opt, std::vector<Lambda> lr_lambdas)
    : LRScheduler(opt), lambdas_(std::move(lr_lambdas)) {
  VOLT_CHECK(lambdas_.size() == num_groups(), ConfigError, "LambdaLR: expected ", num_groups(),
             " lr_lambdas (one per param group), got ", lambdas_.size());
  for (size_t i = 0; i < lambdas_.size(); ++i)
    VOLT_CHECK(static_cast<bool>(lambdas_[i]), ConfigError, "LambdaLR: lr_lambda ", i, " is an empty function");
  initial_step();  // lr_lambda(0) applies at once (a warm-up starts low)
}

std::vector<double> LambdaLR::get_lr() {
  std::vector<double> lrs;
  for (size_t i = 0; i < base_lrs_.size(); ++i) lrs.push_back(base_lrs_[i] * lambdas_[i](last_epoch_));
  return lrs;
}

}  // namespace volt
