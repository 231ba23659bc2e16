// PyTorch 1.13's ReduceLROnPlateau, comparison for comparison.
#include "volt/optim/lr_schedulers/reduce_lr_on_plateau.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "volt/core/errors.h"

namespace volt {

ReduceLROnPlateau::ReduceLROnPlateau(torch::optim::Optimizer& opt, ReduceLROnPlateauOptions options)
    : LRScheduler(opt), options_(std::move(options)) {
  const ReduceLROnPlateauOptions& o = options_;
  VOLT_CHECK(o.mode == "min" || o.mode == "max", ConfigError, "ReduceLROnPlateau: mode must be 'min' or 'max', got '",
             o.mode, "'");
  VOLT_CHECK(o.threshold_mode == "rel" || o.threshold_mode == "abs", ConfigError,
             "ReduceLROnPlateau: threshold_mode must be 'rel' or 'abs', got '", o.threshold_mode, "'");
  VOLT_CHECK(o.factor >= 0.0 && o.factor < 1.0, ConfigError, "ReduceLROnPlateau: factor must be in [0, 1), got ",
             o.factor);
  VOLT_CHECK(o.patience >= 0, ConfigError, "ReduceLROnPlateau: patience must be >= 0, got ", o.patience);
  VOLT_CHECK(o.cooldown >= 0, ConfigError, "ReduceLROnPlateau: cooldown must be >= 0, got ", o.cooldown);
  VOLT_CHECK(o.threshold >= 0.0 && std::isfinite(o.threshold), ConfigError,
             "ReduceLROnPlateau: threshold must be >= 0, got ", o.threshold);
  VOLT_CHECK(o.eps >= 0.0, ConfigError, "ReduceLROnPlateau: eps must be >= 0, got ", o.eps);
  min_lrs_ = detail::per_group(o.min_lr, num_groups(), "ReduceLROnPlateau: min_lr");
  for (double m : min_lrs_) VOLT_CHECK(m >= 0.0, ConfigError, "ReduceLROnPlateau: min_lr must be >= 0, got ", m);
  max_mode_ = o.mode == "max";
  abs_threshold_ = o.threshold_mode == "abs";
  best_ = max_mode_ ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  last_epoch_ = 0;
}

void ReduceLROnPlateau::step() {
  throw ConfigError(
      "ReduceLROnPlateau steps with a metric: call step(metric); in configure_optimizers set "
      "OptimizerConfig::monitor to the metric's key (e.g. \"val_loss\")");
}

bool ReduceLROnPlateau::is_better(double a, double best) const {
  if (!max_mode_ && !abs_threshold_) return a < best * (1. - options_.threshold);
  if (!max_mode_) return a < best - options_.threshold;
  if (!abs_threshold_) return a > best * (options_.threshold + 1.);
  return a > best + options_.threshold;
}

void ReduceLROnPlateau::step(double metric) {
  ++last_epoch_;
  if (is_better(metric, best_)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_epochs_ = 0;  // bad steps during the cooldown do not count
  }
  if (num_bad_epochs_ > options_.patience) {
    auto& groups = optimizer().param_groups();
    VOLT_CHECK(groups.size() == min_lrs_.size(), ConfigError, name(), ": the optimizer has ", groups.size(),
               " param groups, the scheduler was built for ", min_lrs_.size(),
               ": build the scheduler after adding every param group");
    for (size_t i = 0; i < groups.size(); ++i) {
      const double old_lr = groups[i].options().get_lr();
      const double new_lr = std::max(old_lr * options_.factor, min_lrs_[i]);
      if (old_lr - new_lr > options_.eps) groups[i].options().set_lr(new_lr);
    }
    cooldown_counter_ = options_.cooldown;
    num_bad_epochs_ = 0;
  }
}

void ReduceLROnPlateau::set_last_epoch(int64_t epoch) {
  VOLT_CHECK(epoch >= 0, ConfigError, name(), ": set_last_epoch needs a position >= 0, got ", epoch);
  last_epoch_ = epoch;
}

YAML::Node ReduceLROnPlateau::state_dict() const {
  YAML::Node n = LRScheduler::state_dict();
  n["best"] = detail::encode_double(best_);
  n["num_bad_epochs"] = num_bad_epochs_;
  n["cooldown_counter"] = cooldown_counter_;
  return n;
}

void ReduceLROnPlateau::load_state_dict(const YAML::Node& state) {
  LRScheduler::load_state_dict(state);  // last_epoch and, when saved, the groups' lrs
  if (state["best"]) {
    best_ = detail::decode_double(state["best"], name() + ".best");
    num_bad_epochs_ = detail::decode_int(state, "num_bad_epochs", name());
    cooldown_counter_ = detail::decode_int(state, "cooldown_counter", name());
  }
}

}  // namespace volt
