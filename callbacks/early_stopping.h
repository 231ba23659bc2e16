#pragma once
/// EarlyStopping: stops fit when `monitor` has not improved by `min_delta` for `patience` checks,
/// as soon as it is better than `stopping_threshold` or worse than `divergence_threshold`, or when
/// it is not finite (`check_finite`), as Lightning's. The check runs at the training epoch's end or
/// after each validation (`check_on_train_epoch_end`). All ranks agree on the decision (any rank's
/// stop stops every rank). State is checkpointed.
///
/// Ownership: a callback (shared). Thread-safety: hooks run on the training thread.
#include <optional>
#include <string>

#include "volt/callbacks/callback.h"
#include "volt/core/errors.h"
#include "volt/core/options.h"

namespace volt {

struct EarlyStoppingOptions {
  std::string monitor = "val_loss";
  double min_delta = 0.0;
  int64_t patience = 3;
  /// Log each improvement and the stop's reason (info); a stop is logged without it too.
  bool verbose = false;
  std::string mode = "min";
  bool strict = true;  // error if the monitor was never logged
  bool check_finite = true;
  std::optional<double> stopping_threshold;    ///< stop once the monitor is better than it
  std::optional<double> divergence_threshold;  ///< stop once the monitor is worse than it
  /// Check at the training epoch's end (true) or after each validation (false). Unset: Lightning's
  /// rule (at the epoch's end when validation runs once at the end of every epoch, i.e.
  /// val_check_interval 1.0 and check_val_every_n_epoch 1, or when there is no validation loop).
  std::optional<bool> check_on_train_epoch_end;
  /// With several ranks, only rank 0 logs (otherwise every rank, its rank in front).
  bool log_rank_zero_only = false;

  template <class V>
  void visit(V& v) {
    v("monitor", monitor)("min_delta", min_delta)("patience", patience)("verbose", verbose)("mode", mode)(
        "strict", strict)("check_finite", check_finite)("stopping_threshold", stopping_threshold)(
        "divergence_threshold", divergence_threshold)("check_on_train_epoch_end", check_on_train_epoch_end)(
        "log_rank_zero_only", log_rank_zero_only);
  }
  /// The constructor's checks, naming `<prefix>.<field>` (the CLI: trainer.callbacks[i].init_args).
  void validate(const std::string& prefix = "EarlyStopping") const;
};

class EarlyStopping : public Callback {
 public:
  explicit EarlyStopping(EarlyStoppingOptions options);
  /// As Lightning's: "EarlyStopping{'monitor': 'val_loss', 'mode': 'min'}".
  std::string state_key() const override {
    return "EarlyStopping{'monitor': '" + options_.monitor + "', 'mode': '" + options_.mode + "'}";
  }
  std::vector<std::string> legacy_state_keys() const override {
    return {"EarlyStopping{monitor=" + options_.monitor + "}"};
  }
  void setup(Trainer&, LightningModule&, const std::string& stage) override;
  void teardown(Trainer&, LightningModule&, const std::string& stage) override;
  void on_validation_end(Trainer&, LightningModule&) override;
  void on_train_epoch_end(Trainer&, LightningModule&) override;
  YAML::Node state_dict() const override;
  void load_state_dict(const YAML::Node& state) override;
  int64_t wait_count() const { return wait_count_; }
  double best_score() const { return best_; }
  int64_t stopped_epoch() const { return stopped_epoch_; }
  /// Why the last check stopped or improved, in Lightning's words ("" if neither).
  const std::string& last_reason() const { return reason_; }

 private:
  EarlyStoppingOptions options_;
  double best_;
  int64_t wait_count_ = 0;
  int64_t stopped_epoch_ = -1;
  bool fitting_ = false;
  bool validated_ = false;  // a (non-sanity) validation has run in this fit
  std::string reason_;
  bool check_on_train_epoch_end(const Trainer& t) const;
  void check(Trainer& t);
  /// This check's verdict on `current`; sets reason_ and updates the best score and the count.
  bool evaluate(double current);
  void log_info(const Trainer& t, const std::string& message) const;
};

}  // namespace volt
