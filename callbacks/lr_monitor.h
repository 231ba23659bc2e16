#pragma once
/// LearningRateMonitor: logs each optimizer's param-group learning rates ("lr-<Optimizer>" or
/// "lr-<Optimizer>/pg<i>") every `logging_interval` ("step" or "epoch"), as Lightning's.
#include "volt/callbacks/callback.h"
#include "volt/core/errors.h"

namespace volt {

/// The constructor's argument as an options struct (for configs: `class_path: LearningRateMonitor`).
struct LearningRateMonitorOptions {
  std::string logging_interval = "step";

  template <class V>
  void visit(V& v) {
    v("logging_interval", logging_interval);
  }
  void validate(const std::string& prefix = "LearningRateMonitor") const {
    VOLT_CHECK(logging_interval == "step" || logging_interval == "epoch", ConfigError, "config key '", prefix,
               ".logging_interval': expected 'step' or 'epoch', got '", logging_interval, "'");
  }
};

class LearningRateMonitor : public Callback {
 public:
  explicit LearningRateMonitor(std::string logging_interval = "step");
  std::string state_key() const override { return "LearningRateMonitor"; }
  void on_train_batch_start(Trainer&, LightningModule&, const Batch&, int64_t) override;
  void on_train_epoch_start(Trainer&, LightningModule&) override;

 private:
  void log_lrs(Trainer& t, LightningModule& m);
  std::string interval_;
};

}  // namespace volt
