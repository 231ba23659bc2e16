#include "volt/callbacks/early_stopping.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <limits>

#include "volt/core/errors.h"
#include "volt/trainer/trainer.h"

namespace volt {

EarlyStopping::EarlyStopping(EarlyStoppingOptions options) : options_(std::move(options)) {
  VOLT_CHECK(options_.mode == "min" || options_.mode == "max", ConfigError,
             "EarlyStopping.mode: expected 'min' or 'max'");
  VOLT_CHECK(options_.patience >= 0, ConfigError, "EarlyStopping.patience: must be >= 0");
  best_ = options_.mode == "min" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
}

void EarlyStopping::on_validation_end(Trainer& t, LightningModule&) {
  if (t.sanity_checking()) return;
  validated_this_epoch_ = true;
  check(t);
}

void EarlyStopping::on_train_epoch_start(Trainer&, LightningModule&) { validated_this_epoch_ = false; }

void EarlyStopping::on_train_epoch_end(Trainer& t, LightningModule&) {
  // Only when the monitor exists here: a validation metric is checked when validation runs.
  if (!validated_this_epoch_ && t.callback_metrics().count(options_.monitor)) check(t);
}

void EarlyStopping::check(Trainer& t) {
  if (t.fast_dev_run() > 0) return;  // as Lightning: a smoke test never stops early
  auto it = t.callback_metrics().find(options_.monitor);
  if (it == t.callback_metrics().end()) {
    VOLT_CHECK(!options_.strict, ConfigError, "EarlyStopping: monitor '", options_.monitor,
               "' was never logged; log it in validation_step or set strict=false");
    return;
  }
  const double v = it->second;
  bool stop = false;
  if (options_.check_finite && !std::isfinite(v)) {
    stop = true;
  } else {
    const bool improved = options_.mode == "min" ? v < best_ - options_.min_delta : v > best_ + options_.min_delta;
    if (improved) {
      best_ = v;
      wait_count_ = 0;
    } else if (++wait_count_ >= options_.patience) {
      stop = true;
    }
  }
  stop = t.strategy().reduce_boolean_decision(stop, /*all=*/false);
  if (stop) {
    t.should_stop = true;
    stopped_epoch_ = t.current_epoch();
    spdlog::info("EarlyStopping: '{}' did not improve for {} checks (best {:.5f}); stopping", options_.monitor,
                 wait_count_, best_);
  }
}

YAML::Node EarlyStopping::state_dict() const {
  YAML::Node n;
  n["wait_count"] = wait_count_;
  n["best_score"] = best_;
  n["stopped_epoch"] = stopped_epoch_;
  n["patience"] = options_.patience;
  return n;
}

void EarlyStopping::load_state_dict(const YAML::Node& s) {
  wait_count_ = s["wait_count"].as<int64_t>();
  best_ = s["best_score"].as<double>();
  stopped_epoch_ = s["stopped_epoch"].as<int64_t>();
}

}  // namespace volt
