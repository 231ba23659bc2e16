#include "volt/callbacks/lr_monitor.h"

#include <torch/optim.h>

#include <map>

#include "volt/checkpoint/optimizer_hparams.h"
#include "volt/core/errors.h"
#include "volt/trainer/trainer.h"

namespace volt {

LearningRateMonitor::LearningRateMonitor(std::string logging_interval) : interval_(std::move(logging_interval)) {
  VOLT_CHECK(interval_ == "step" || interval_ == "epoch", ConfigError,
             "LearningRateMonitor.logging_interval: expected 'step' or 'epoch', got '", interval_, "'");
}

void LearningRateMonitor::log_lrs(Trainer& t, LightningModule& m) {
  // Lightning's names: "lr-<name or optimizer type>", "-<k>" for the k-th repeat of a name,
  // "/pg<i>" per param group when there are several.
  std::map<std::string, int> seen;
  for (const auto& c : t.optimizers().configs) {
    std::string type = optimizer_type_name(*c.optimizer);
    std::string name = "lr-" + (!c.name.empty() ? c.name : !type.empty() ? type : std::string("Optimizer"));
    const int repeat = seen[name]++;
    if (repeat > 0) name += "-" + std::to_string(repeat);
    const auto& groups = c.optimizer->param_groups();
    for (size_t i = 0; i < groups.size(); ++i) {
      LogOptions o;
      o.on_step = true;
      o.on_epoch = false;
      m.log(groups.size() == 1 ? name : name + "/pg" + std::to_string(i + 1), groups[i].options().get_lr(), o);
    }
  }
}

void LearningRateMonitor::on_train_batch_start(Trainer& t, LightningModule& m, const Batch&, int64_t) {
  if (interval_ == "step") log_lrs(t, m);
}

void LearningRateMonitor::on_train_epoch_start(Trainer& t, LightningModule& m) {
  if (interval_ == "epoch") log_lrs(t, m);
}

}  // namespace volt
