#pragma once
/// EarlyStopping: stops fit when `monitor` has not improved by `min_delta` for `patience`
/// validation checks (without validation in an epoch: at its end, on a training metric), as
/// Lightning's. All ranks agree on the decision. State is checkpointed.
#include "volt/callbacks/callback.h"
#include "volt/core/errors.h"

namespace volt {

struct EarlyStoppingOptions {
  std::string monitor = "val_loss";
  double min_delta = 0.0;
  int64_t patience = 3;
  std::string mode = "min";
  bool check_finite = true;
  bool strict = true;  // error if the monitor was never logged

  template <class V>
  void visit(V& v) {
    v("monitor", monitor)("min_delta", min_delta)("patience", patience)("mode", mode)("check_finite", check_finite)(
        "strict", strict);
  }
  /// The constructor's checks, naming `<prefix>.<field>` (the CLI: trainer.callbacks[i].init_args).
  void validate(const std::string& prefix = "EarlyStopping") const {
    VOLT_CHECK(mode == "min" || mode == "max", ConfigError, "config key '", prefix,
               ".mode': expected 'min' or 'max', got '", mode, "'");
    VOLT_CHECK(patience >= 0, ConfigError, "config key '", prefix, ".patience': must be >= 0, got ", patience);
  }
};

class EarlyStopping : public Callback {
 public:
  explicit EarlyStopping(EarlyStoppingOptions options);
  std::string state_key() const override { return "EarlyStopping{monitor=" + options_.monitor + "}"; }
  void on_validation_end(Trainer&, LightningModule&) override;
  /// Without a validation run in this epoch (no validation loader, or none due this epoch), the
  /// check runs at the end of the training epoch if the monitor was logged (a training metric),
  /// as Lightning's does.
  void on_train_epoch_start(Trainer&, LightningModule&) override;
  void on_train_epoch_end(Trainer&, LightningModule&) override;
  YAML::Node state_dict() const override;
  void load_state_dict(const YAML::Node& state) override;
  int64_t wait_count() const { return wait_count_; }
  double best_score() const { return best_; }
  int64_t stopped_epoch() const { return stopped_epoch_; }

 private:
  EarlyStoppingOptions options_;
  double best_;
  int64_t wait_count_ = 0;
  int64_t stopped_epoch_ = -1;
  bool validated_this_epoch_ = false;
  void check(Trainer& t);
};

}  // namespace volt
