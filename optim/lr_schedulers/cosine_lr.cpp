// PyTorch 1.13's formulas, operation for operation (see basic_lr.cpp).
#include "volt/optim/lr_schedulers/cosine_lr.h"

#include <cmath>

#include "volt/core/errors.h"

namespace volt {
namespace {
constexpr double kPi = 3.141592653589793;  // Python's math.pi
}

CosineAnnealingLR::CosineAnnealingLR(torch::optim::Optimizer& opt, int64_t T_max, double eta_min)
    : LRScheduler(opt), t_max_(T_max), eta_min_(eta_min) {
  VOLT_CHECK(T_max > 0, ConfigError, "CosineAnnealingLR: T_max must be > 0, got ", T_max);
  VOLT_CHECK(std::isfinite(eta_min) && eta_min >= 0.0, ConfigError,
             "CosineAnnealingLR: eta_min (an absolute lr) must be >= 0, got ", eta_min);
  initial_step();
}

std::vector<double> CosineAnnealingLR::get_lr() {
  std::vector<double> lrs = current_lrs();
  if (last_epoch_ == 0) return lrs;
  const double t_max = static_cast<double>(t_max_);
  if ((last_epoch_ - 1 - t_max_) % (2 * t_max_) == 0) {
    // One step after a minimum, where the ratio below would divide by 1 + cos(pi) = 0.
    for (size_t i = 0; i < lrs.size(); ++i)
      lrs[i] = lrs[i] + (base_lrs_[i] - eta_min_) * (1 - std::cos(kPi / t_max)) / 2;
    return lrs;
  }
  const double ratio = (1 + std::cos(kPi * static_cast<double>(last_epoch_) / t_max)) /
                       (1 + std::cos(kPi * static_cast<double>(last_epoch_ - 1) / t_max));
  for (double& lr : lrs) lr = ratio * (lr - eta_min_) + eta_min_;
  return lrs;
}

std::vector<double> CosineAnnealingLR::closed_form_lr() {
  std::vector<double> lrs;
  const double c = 1 + std::cos(kPi * static_cast<double>(last_epoch_) / static_cast<double>(t_max_));
  for (double base : base_lrs_) lrs.push_back(eta_min_ + (base - eta_min_) * c / 2);
  return lrs;
}

CosineAnnealingWarmRestarts::CosineAnnealingWarmRestarts(torch::optim::Optimizer& opt, int64_t T_0, int64_t T_mult,
                                                         double eta_min)
    : LRScheduler(opt), t_0_(T_0), t_mult_(T_mult), eta_min_(eta_min), t_i_(T_0) {
  VOLT_CHECK(T_0 > 0, ConfigError, "CosineAnnealingWarmRestarts: T_0 must be > 0, got ", T_0);
  VOLT_CHECK(T_mult >= 1, ConfigError, "CosineAnnealingWarmRestarts: T_mult must be >= 1, got ", T_mult);
  VOLT_CHECK(std::isfinite(eta_min) && eta_min >= 0.0, ConfigError,
             "CosineAnnealingWarmRestarts: eta_min (an absolute lr) must be >= 0, got ", eta_min);
  initial_step();
}

void CosineAnnealingWarmRestarts::step() {
  if (last_epoch_ < 0) {
    t_i_ = t_0_;
    t_cur_ = 0;
  } else if (++t_cur_ >= t_i_) {
    t_cur_ -= t_i_;
    t_i_ *= t_mult_;
  }
  ++last_epoch_;
  set_group_lrs(get_lr());
}

std::vector<double> CosineAnnealingWarmRestarts::get_lr() {
  const double c = 1 + std::cos(kPi * static_cast<double>(t_cur_) / static_cast<double>(t_i_));
  std::vector<double> lrs;
  for (double base : base_lrs_) lrs.push_back(eta_min_ + (base - eta_min_) * c / 2);
  return lrs;
}

std::vector<double> CosineAnnealingWarmRestarts::closed_form_lr() {
  // PyTorch's step(epoch), in integers: PyTorch finds the period with a float logarithm, which can
  // land one period off at an exact restart.
  t_i_ = t_0_;
  t_cur_ = last_epoch_;
  while (t_cur_ >= t_i_) {
    t_cur_ -= t_i_;
    t_i_ *= t_mult_;
  }
  return get_lr();
}

YAML::Node CosineAnnealingWarmRestarts::state_dict() const {
  YAML::Node n = LRScheduler::state_dict();
  n["T_i"] = t_i_;
  n["T_cur"] = t_cur_;
  return n;
}

void CosineAnnealingWarmRestarts::load_state_dict(const YAML::Node& state) {
  LRScheduler::load_state_dict(state);  // the older form sets T_i / T_cur from last_epoch
  if (state["T_i"]) {
    t_i_ = detail::decode_int(state, "T_i", name());
    t_cur_ = detail::decode_int(state, "T_cur", name());
    VOLT_CHECK(t_i_ > 0 && t_cur_ >= 0 && t_cur_ < t_i_, CheckpointError, name(), ": saved T_i ", t_i_, ", T_cur ",
               t_cur_, " are not a position in a period");
  }
}

}  // namespace volt
