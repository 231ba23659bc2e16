#include "volt/callbacks/early_stopping.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <limits>

#include "volt/core/errors.h"
#include "volt/trainer/trainer.h"

namespace volt {

namespace {
/// A float as Python's str() writes it (Lightning's messages format the values so): shortest
/// round-trip digits, "1.0" rather than "1".
std::string py_float(double v) {
  std::string s = fmt::format("{}", v);
  if (std::isfinite(v) && s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}
}  // namespace

void EarlyStoppingOptions::validate(const std::string& prefix) const {
  VOLT_CHECK(mode == "min" || mode == "max", ConfigError, "config key '", prefix,
             ".mode': expected 'min' or 'max', got '", mode, "'");
  VOLT_CHECK(patience >= 0, ConfigError, "config key '", prefix, ".patience': must be >= 0, got ", patience);
  VOLT_CHECK(!stopping_threshold || std::isfinite(*stopping_threshold), ConfigError, "config key '", prefix,
             ".stopping_threshold': must be a finite number or null");
  VOLT_CHECK(!divergence_threshold || std::isfinite(*divergence_threshold), ConfigError, "config key '", prefix,
             ".divergence_threshold': must be a finite number or null");
}

EarlyStopping::EarlyStopping(EarlyStoppingOptions options) : options_(std::move(options)) {
  options_.validate();
  best_ = options_.mode == "min" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
}

void EarlyStopping::setup(Trainer&, LightningModule&, const std::string& stage) {
  fitting_ = stage == "fit";
  validated_ = false;
}

void EarlyStopping::teardown(Trainer&, LightningModule&, const std::string&) { fitting_ = false; }

bool EarlyStopping::check_on_train_epoch_end(const Trainer& t) const {
  if (options_.check_on_train_epoch_end) return *options_.check_on_train_epoch_end;
  // Lightning's rule for None, and without a validation loop the epoch's end (the only point).
  const auto& o = t.options();
  return !t.enable_validation() ||
         (o.check_val_every_n_epoch == 1 && o.val_check_interval.is_fraction && o.val_check_interval.value == 1.0);
}

void EarlyStopping::on_validation_end(Trainer& t, LightningModule&) {
  if (!fitting_ || t.sanity_checking()) return;
  validated_ = true;
  if (!check_on_train_epoch_end(t)) check(t);
}

void EarlyStopping::on_train_epoch_end(Trainer& t, LightningModule&) {
  if (!fitting_ || !check_on_train_epoch_end(t)) return;
  // A validation metric before the first validation (validation every other epoch, with
  // check_on_train_epoch_end set) is not missing yet; once validation has run, or without a
  // validation loop, a missing monitor is refused (strict).
  if (t.enable_validation() && !validated_ && !t.callback_metrics().count(options_.monitor)) return;
  check(t);
}

void EarlyStopping::log_info(const Trainer& t, const std::string& message) const {
  // Lightning's _log_info: the rank in front when there are several, every rank unless
  // log_rank_zero_only.
  if (t.world_size() <= 1) {
    spdlog::info("{}", message);
  } else if (!options_.log_rank_zero_only || t.global_rank() == 0) {
    spdlog::info("[rank: {}] {}", t.global_rank(), message);
  }
}

bool EarlyStopping::evaluate(double current) {
  // Lightning's _evaluate_stopping_criteria, in its order and words.
  const bool min = options_.mode == "min";
  auto better = [min](double a, double b) { return min ? a < b : a > b; };
  const char* order = min ? "<" : ">";
  if (options_.check_finite && !std::isfinite(current)) {
    reason_ = fmt::format(
        "Monitored metric {} = {} is not finite. Previous best value was {:.3f}. Signaling Trainer "
        "to stop.",
        options_.monitor, py_float(current), best_);
    return true;
  }
  if (options_.stopping_threshold && better(current, *options_.stopping_threshold)) {
    reason_ = fmt::format("Stopping threshold reached: {} = {} {} {}. Signaling Trainer to stop.", options_.monitor,
                          py_float(current), order, py_float(*options_.stopping_threshold));
    return true;
  }
  if (options_.divergence_threshold && better(-current, -*options_.divergence_threshold)) {
    reason_ = fmt::format("Divergence threshold reached: {} = {} {} {}. Signaling Trainer to stop.", options_.monitor,
                          py_float(current), order, py_float(*options_.divergence_threshold));
    return true;
  }
  // min_delta counts against the candidate: it must beat the best by more than min_delta.
  const double delta = min ? -options_.min_delta : options_.min_delta;
  if (better(current - delta, best_)) {
    reason_ =
        std::isfinite(best_)
            ? fmt::format("Metric {} improved by {:.3f} >= min_delta = {}. New best score: {:.3f}", options_.monitor,
                          std::abs(best_ - current), py_float(std::abs(options_.min_delta)), current)
            : fmt::format("Metric {} improved. New best score: {:.3f}", options_.monitor, current);
    best_ = current;
    wait_count_ = 0;
    return false;
  }
  if (++wait_count_ >= options_.patience) {
    reason_ = fmt::format(
        "Monitored metric {} did not improve in the last {} records. Best score: {:.3f}. Signaling "
        "Trainer to stop.",
        options_.monitor, wait_count_, best_);
    return true;
  }
  return false;
}

void EarlyStopping::check(Trainer& t) {
  reason_.clear();
  if (t.fast_dev_run() > 0) return;  // as Lightning: a smoke test never stops early
  auto it = t.callback_metrics().find(options_.monitor);
  if (it == t.callback_metrics().end()) {
    std::string known;
    for (const auto& [k, v] : t.callback_metrics()) known += (known.empty() ? "" : ", ") + k;
    if (options_.strict) {
      throw ConfigError(
          detail::str_cat("EarlyStopping: monitor '", options_.monitor, "' was never logged (logged metrics: [", known,
                          "]); log it with log('", options_.monitor, "', value) in ",
                          t.enable_validation() ? "validation_step" : "training_step (there is no validation loop)",
                          ", or set strict=false"));
    }
    if (options_.verbose && t.is_global_zero())
      spdlog::warn(
          "Early stopping conditioned on metric `{}` which is not available. Pass in or modify your "
          "`EarlyStopping` callback to use any of the following: [{}]",
          options_.monitor, known);
    return;
  }
  const bool mine = evaluate(it->second);
  // Any rank's stop stops every rank: one rank alone leaving fit would hang the others' collectives.
  const bool stop = t.strategy().reduce_boolean_decision(mine, /*all=*/false);
  if (stop) {
    t.should_stop = true;
    stopped_epoch_ = t.current_epoch();
    // A stop is worth a line without verbose too; one agreed because of another rank says so.
    if (mine || options_.verbose) log_info(t, mine ? reason_ : "another rank signaled the Trainer to stop");
  } else if (options_.verbose && !reason_.empty()) {
    log_info(t, reason_);
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
