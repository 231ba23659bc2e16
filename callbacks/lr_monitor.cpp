#include "volt/callbacks/lr_monitor.h"

#include <spdlog/spdlog.h>
#include <torch/optim.h>

#include <map>
#include <optional>

#include "volt/checkpoint/optimizer_hparams.h"
#include "volt/core/errors.h"
#include "volt/trainer/trainer.h"

namespace volt {

namespace {
using torch::optim::OptimizerOptions;

/// Lightning's momentum of a param group: beta1 for the optimizers with betas, else its momentum;
/// nullopt for an optimizer with neither (Lightning logs 0 for it).
std::optional<double> momentum_of(const OptimizerOptions& o) {
  if (auto* a = dynamic_cast<const torch::optim::AdamOptions*>(&o)) return std::get<0>(a->betas());
  if (auto* w = dynamic_cast<const torch::optim::AdamWOptions*>(&o)) return std::get<0>(w->betas());
  if (auto* s = dynamic_cast<const torch::optim::SGDOptions*>(&o)) return s->momentum();
  if (auto* r = dynamic_cast<const torch::optim::RMSpropOptions*>(&o)) return r->momentum();
  return std::nullopt;
}

std::optional<double> weight_decay_of(const OptimizerOptions& o) {
  if (auto* a = dynamic_cast<const torch::optim::AdamOptions*>(&o)) return a->weight_decay();
  if (auto* w = dynamic_cast<const torch::optim::AdamWOptions*>(&o)) return w->weight_decay();
  if (auto* s = dynamic_cast<const torch::optim::SGDOptions*>(&o)) return s->weight_decay();
  if (auto* r = dynamic_cast<const torch::optim::RMSpropOptions*>(&o)) return r->weight_decay();
  if (auto* g = dynamic_cast<const torch::optim::AdagradOptions*>(&o)) return g->weight_decay();
  return std::nullopt;
}
}  // namespace

LearningRateMonitor::LearningRateMonitor(std::string logging_interval)
    : LearningRateMonitor(LearningRateMonitorOptions{std::move(logging_interval)}) {}

LearningRateMonitor::LearningRateMonitor(LearningRateMonitorOptions options) : options_(std::move(options)) {
  options_.validate();
}

void LearningRateMonitor::on_train_start(Trainer& t, LightningModule&) {
  if (!t.is_global_zero()) return;
  // Lightning's warnings, once per fit.
  bool no_momentum = false, no_weight_decay = false;
  for (const auto& c : t.optimizers().configs)
    for (const auto& g : c.optimizer->param_groups()) {
      no_momentum = no_momentum || !momentum_of(g.options());
      no_weight_decay = no_weight_decay || !weight_decay_of(g.options());
    }
  if (options_.log_momentum && no_momentum)
    spdlog::warn(
        "You have set log_momentum=True, but some optimizers do not have momentum. This will log a value 0 for the "
        "momentum.");
  if (options_.log_weight_decay && no_weight_decay)
    spdlog::warn(
        "LearningRateMonitor(log_weight_decay=True): some optimizers have no weight_decay; none is logged "
        "for them");
}

void LearningRateMonitor::log_lrs(Trainer& t, LightningModule& m) {
  // Lightning's names: "lr-<name or optimizer type>", "-<k>" for the k-th repeat of a name,
  // "/pg<i>" per param group when there are several; "-momentum" and "-weight_decay" after that.
  std::map<std::string, int> seen;
  LogOptions o;
  o.on_step = true;
  o.on_epoch = false;
  for (const auto& c : t.optimizers().configs) {
    std::string type = optimizer_type_name(*c.optimizer);
    std::string name = "lr-" + (!c.name.empty() ? c.name : !type.empty() ? type : std::string("Optimizer"));
    const int repeat = seen[name]++;
    if (repeat > 0) name += "-" + std::to_string(repeat);
    const auto& groups = c.optimizer->param_groups();
    for (size_t i = 0; i < groups.size(); ++i) {
      const std::string key = groups.size() == 1 ? name : name + "/pg" + std::to_string(i + 1);
      const OptimizerOptions& go = groups[i].options();
      m.log(key, go.get_lr(), o);
      if (options_.log_momentum) m.log(key + "-momentum", momentum_of(go).value_or(0.0), o);
      if (options_.log_weight_decay)
        if (const auto wd = weight_decay_of(go)) m.log(key + "-weight_decay", *wd, o);
    }
  }
}

void LearningRateMonitor::on_train_batch_start(Trainer& t, LightningModule& m, const Batch&, int64_t) {
  if (options_.logging_interval == "step") log_lrs(t, m);
}

void LearningRateMonitor::on_train_epoch_start(Trainer& t, LightningModule& m) {
  if (options_.logging_interval == "epoch") log_lrs(t, m);
}

}  // namespace volt
