#pragma once
/// What LightningModule::configure_optimizers returns: one optimizer or several, each with an
/// optional learning-rate scheduler, as Lightning's optimizer / lr_scheduler dicts.
///
/// Ownership: the Trainer keeps the returned Optimizers (shared pointers) for the duration of a
/// fit; the module's optimizers() / lr_schedulers() hand out non-owning views of them.
/// Thread-safety: none (the training thread only).
#include <torch/optim/optimizer.h>

#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "volt/core/choice.h"
#include "volt/optim/lr_scheduler.h"

namespace volt {

/// When a scheduler steps: after every optimizer step ("step") or every epoch ("epoch").
enum class SchedulerInterval { Step, Epoch };
template <>
struct ChoiceNames<SchedulerInterval> {
  static const std::vector<std::pair<SchedulerInterval, const char*>>& names() {
    static const std::vector<std::pair<SchedulerInterval, const char*>> n = {{SchedulerInterval::Step, "step"},
                                                                             {SchedulerInterval::Epoch, "epoch"}};
    return n;
  }
  static std::string normalize(const std::string& s) { return s; }
};

/// Lightning's gradient_clip_algorithm: "norm" (scale all gradients to a total L2 norm) or "value"
/// (clamp each element).
enum class GradientClipAlgorithm { Norm, Value };
template <>
struct ChoiceNames<GradientClipAlgorithm> {
  static const std::vector<std::pair<GradientClipAlgorithm, const char*>>& names() {
    static const std::vector<std::pair<GradientClipAlgorithm, const char*>> n = {
        {GradientClipAlgorithm::Norm, "norm"}, {GradientClipAlgorithm::Value, "value"}};
    return n;
  }
  static std::string normalize(const std::string& s) { return s; }
};

/// One optimizer and, optionally, its scheduler stepped every `frequency` epochs or optimizer steps
/// (Lightning's lr_scheduler dict). Under automatic optimization the Trainer steps the scheduler;
/// under manual optimization the module does (LightningModule::lr_schedulers()).
struct OptimizerConfig {
  std::shared_ptr<torch::optim::Optimizer> optimizer;
  std::shared_ptr<LRScheduler> lr_scheduler;
  Choice<SchedulerInterval> interval = SchedulerInterval::Epoch;
  int64_t frequency = 1;
  /// The metric a scheduler that needs one (ReduceLROnPlateau) steps with: a key of
  /// Trainer::callback_metrics(), e.g. "val_loss".
  std::string monitor;
  /// A `monitor` missing from the metrics when the scheduler steps: an error (true, Lightning's
  /// default), or a warning and no step (false).
  bool strict = true;
  /// The name LearningRateMonitor logs under ("lr-<name>"); empty: "lr-<optimizer type>".
  std::string name;
};

/// configure_optimizers' result: converts from one OptimizerConfig, from an optimizer alone, or
/// from a list of OptimizerConfigs. Several optimizers need manual optimization (as in Lightning
/// 2.x: the module decides which one steps when).
struct Optimizers {
  Optimizers() = default;
  Optimizers(OptimizerConfig one) { configs.push_back(std::move(one)); }             // NOLINT: implicit by design
  Optimizers(std::vector<OptimizerConfig> several) : configs(std::move(several)) {}  // NOLINT
  Optimizers(std::initializer_list<OptimizerConfig> several) : configs(several) {}
  template <class O, class = std::enable_if_t<std::is_base_of_v<torch::optim::Optimizer, O>>>
  Optimizers(std::shared_ptr<O> optimizer) {  // NOLINT
    configs.push_back(OptimizerConfig{std::move(optimizer)});
  }

  size_t size() const { return configs.size(); }
  bool empty() const { return configs.empty(); }
  OptimizerConfig& operator[](size_t i) { return configs[i]; }
  const OptimizerConfig& operator[](size_t i) const { return configs[i]; }

  std::vector<OptimizerConfig> configs;
};

}  // namespace volt
