#pragma once
/// LearningRateMonitor: logs each param group's learning rate ("lr-<Optimizer>" or
/// "lr-<Optimizer>/pg<i>") every `logging_interval` ("step" or "epoch"), as Lightning's.
#include "volt/callbacks/callback.h"

namespace volt {

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
