#include "volt/callbacks/lr_monitor.h"

#include <torch/optim.h>

#include "volt/core/errors.h"
#include "volt/trainer/trainer.h"

namespace volt {

LearningRateMonitor::LearningRateMonitor(std::string logging_interval) : interval_(std::move(logging_interval)) {
  VOLT_CHECK(interval_ == "step" || interval_ == "epoch", ConfigError,
             "LearningRateMonitor.logging_interval: expected 'step' or 'epoch', got '", interval_, "'");
}

void LearningRateMonitor::log_lrs(Trainer& t, LightningModule& m) {
  auto* opt = t.optimizer();
  if (!opt) return;
  std::string name = "lr-Optimizer";
  if (dynamic_cast<torch::optim::Adam*>(opt))
    name = "lr-Adam";
  else if (dynamic_cast<torch::optim::AdamW*>(opt))
    name = "lr-AdamW";
  else if (dynamic_cast<torch::optim::SGD*>(opt))
    name = "lr-SGD";
  const auto& groups = opt->param_groups();
  for (size_t i = 0; i < groups.size(); ++i) {
    LogOptions o;
    o.on_step = true;
    o.on_epoch = false;
    m.log(groups.size() == 1 ? name : name + "/pg" + std::to_string(i + 1), groups[i].options().get_lr(), o);
  }
}

void LearningRateMonitor::on_train_batch_start(Trainer& t, LightningModule& m, const Batch&, int64_t) {
  if (interval_ == "step") log_lrs(t, m);
}

void LearningRateMonitor::on_train_epoch_start(Trainer& t, LightningModule& m) {
  if (interval_ == "epoch") log_lrs(t, m);
}

}  // namespace volt
