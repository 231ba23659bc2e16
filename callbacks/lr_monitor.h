#pragma once
/// LearningRateMonitor: logs each optimizer's param-group learning rates ("lr-<Optimizer>" or
/// "lr-<Optimizer>/pg<i>") every `logging_interval` ("step" or "epoch"), as Lightning's; with
/// `log_momentum` also "<that name>-momentum" (beta1 of Adam and AdamW, SGD's and RMSprop's
/// momentum; 0, with a warning, for an optimizer without one) and with `log_weight_decay`
/// "<that name>-weight_decay".
///
/// Ownership: a callback (shared). Thread-safety: hooks run on the training thread.
#include "volt/callbacks/callback.h"
#include "volt/core/errors.h"

namespace volt {

/// The constructor's argument as an options struct (for configs: `class_path: LearningRateMonitor`).
struct LearningRateMonitorOptions {
  std::string logging_interval = "step";
  bool log_momentum = false;
  bool log_weight_decay = false;

  template <class V>
  void visit(V& v) {
    v("logging_interval", logging_interval)("log_momentum", log_momentum)("log_weight_decay", log_weight_decay);
  }
  void validate(const std::string& prefix = "LearningRateMonitor") const {
    VOLT_CHECK(logging_interval == "step" || logging_interval == "epoch", ConfigError, "config key '", prefix,
               ".logging_interval': expected 'step' or 'epoch', got '", logging_interval, "'");
  }
};

class LearningRateMonitor : public Callback {
 public:
  explicit LearningRateMonitor(std::string logging_interval = "step");
  explicit LearningRateMonitor(LearningRateMonitorOptions options);
  std::string state_key() const override { return "LearningRateMonitor"; }
  void on_train_start(Trainer&, LightningModule&) override;
  void on_train_batch_start(Trainer&, LightningModule&, const Batch&, int64_t) override;
  void on_train_epoch_start(Trainer&, LightningModule&) override;

 private:
  void log_lrs(Trainer& t, LightningModule& m);
  LearningRateMonitorOptions options_;
};

}  // namespace volt
