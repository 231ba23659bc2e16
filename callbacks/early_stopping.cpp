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
  // Only when the monitor exists here: a validation metric is checked when validation runs. Without
  // a validation loop this is the only check, so a monitor missing now is refused (strict), as
  // Lightning's check at the training epoch's end.
  if (!validated_this_epoch_ && (t.callback_metrics().count(options_.monitor) || !t.enable_validation())) check(t);
}

void EarlyStopping::check(Trainer& t) {
  if (t.fast_dev_run() > 0) return;  // as Lightning: a smoke test never stops early
  auto it = t.callback_metrics().find(options_.monitor);
  if (it == t.callback_metrics().end()) {
    if (options_.strict) {
      std::string known;
      for (const auto& [k, v] : t.callback_metrics()) known += (known.empty() ? "" : ", ") + k;
      throw ConfigError(
          detail::str_cat("EarlyStopping: monitor '", options_.monitor, "' was never logged (logged metrics: [", known,
                          "]); log it with log('", options_.monitor, "', value) in ",
                          t.enable_validation() ? "validation_step" : "training_step (there is no validation loop)",
                          ", or set strict=false"));
    }
    return;
  }
  const double v = it->second;
  bool stop = false;
  std::string why;
  if (options_.check_finite && !std::isfinite(v)) {
    stop = true;
    // Lightning's words for it.
    why = fmt::format("monitored metric '{}' = {} is not finite; previous best value was {:.5f}", options_.monitor, v,
                      best_);
  } else {
    const bool improved = options_.mode == "min" ? v < best_ - options_.min_delta : v > best_ + options_.min_delta;
    if (improved) {
      best_ = v;
      wait_count_ = 0;
    } else if (++wait_count_ >= options_.patience) {
      stop = true;
      why = fmt::format("'{}' did not improve for {} checks (best {:.5f})", options_.monitor, wait_count_, best_);
    }
  }
  stop = t.strategy().reduce_boolean_decision(stop, /*all=*/false);
  if (stop) {
    t.should_stop = true;
    stopped_epoch_ = t.current_epoch();
    // A stop agreed because of another rank's view says so rather than reusing this rank's.
    spdlog::info("EarlyStopping: {}; stopping", why.empty() ? std::string("another rank decided to stop") : why);
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
