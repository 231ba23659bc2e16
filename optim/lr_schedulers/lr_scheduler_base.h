#pragma once
/// LRScheduler: the base of volt's learning-rate schedulers, which follow
/// torch.optim.lr_scheduler (PyTorch 1.13) value for value.
///
/// As in PyTorch, constructing a scheduler applies its step 0 (last_epoch() == 0) to the
/// optimizer's param groups, and each step() advances one position ("epoch" counts scheduler steps:
/// epochs or optimizer steps, as OptimizerConfig::interval says). step() uses PyTorch's chainable
/// form (the new lr from the group's current lr), set_last_epoch() its closed form (from the base
/// lrs), as PyTorch's deprecated step(epoch) does. The base lrs are the groups' lrs when the
/// scheduler is built (PyTorch's initial_lr), one per param group.
///
/// Ownership: holds a non-owning pointer to the optimizer, which must outlive it (OptimizerConfig
/// keeps both). Not thread-safe: step it from the training thread only.
#include <torch/optim/optimizer.h>
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>
#include <vector>

namespace volt {

class SequentialLR;

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  /// The class name, as PyTorch spells it ("StepLR"); checkpoints check it on resume.
  virtual std::string name() const = 0;
  /// Advances one position and sets the param groups' lrs. ReduceLROnPlateau throws ConfigError:
  /// it steps with a metric.
  virtual void step();
  /// Steps with a metric value: ReduceLROnPlateau's step; every other scheduler ignores the value
  /// and calls step(), so a trainer may pass a metric to any scheduler.
  virtual void step(double metric);
  /// True for schedulers that step with a metric (ReduceLROnPlateau), i.e. need a `monitor`.
  virtual bool needs_metric() const { return false; }

  /// Scheduler steps taken since construction (0 right after it).
  int64_t last_epoch() const { return last_epoch_; }
  /// Moves to position `epoch` (>= 0) and sets the lrs from the closed form.
  virtual void set_last_epoch(int64_t epoch);
  /// The optimizer's param-group lrs now (PyTorch's get_last_lr()).
  std::vector<double> current_lrs() const;
  /// The lrs the schedule scales, one per param group.
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  torch::optim::Optimizer& optimizer() const { return *optimizer_; }

  /// Everything a resumed run needs to continue bitwise: last_epoch, base_lrs, the groups' lrs
  /// (last_lrs) and each scheduler's own counters. Doubles are "%.17g" strings, which round-trip
  /// exactly through YAML text.
  virtual YAML::Node state_dict() const;
  /// Restores state_dict(), setting the groups' lrs. Also accepts the older {last_epoch} form
  /// (the lrs then come from the closed form). CheckpointError if the state does not fit.
  virtual void load_state_dict(const YAML::Node& state);

 protected:
  /// Reads the base lrs from the optimizer; the derived constructor calls initial_step() last.
  explicit LRScheduler(torch::optim::Optimizer& optimizer);
  /// PyTorch's get_lr(): the lrs for last_epoch_, chainable (from the groups' lrs) where PyTorch's is.
  virtual std::vector<double> get_lr() = 0;
  /// PyTorch's _get_closed_form_lr(): the lrs for last_epoch_ from the base lrs alone.
  virtual std::vector<double> closed_form_lr() { return get_lr(); }
  /// PyTorch's _initial_step(): last_epoch_ = -1, then step() to position 0.
  void initial_step();
  void set_group_lrs(const std::vector<double>& lrs);
  size_t num_groups() const;

  int64_t last_epoch_ = 0;
  std::vector<double> base_lrs_;

 private:
  friend class SequentialLR;  // resets and drives its children as PyTorch's SequentialLR does
  torch::optim::Optimizer* optimizer_;
};

namespace detail {
/// A double as a "%.17g" YAML scalar ("inf", "-inf", "nan" included): exact through YAML text.
YAML::Node encode_double(double v);
/// Reads encode_double's scalar (or any YAML number); CheckpointError naming `what` otherwise.
double decode_double(const YAML::Node& n, const std::string& what);
YAML::Node encode_doubles(const std::vector<double>& v);
/// Reads a list of `expected` doubles; CheckpointError naming `what` otherwise.
std::vector<double> decode_doubles(const YAML::Node& n, size_t expected, const std::string& what);
/// The integer at state[key]; CheckpointError naming the scheduler and key when missing or not one.
int64_t decode_int(const YAML::Node& state, const std::string& key, const std::string& scheduler);
/// One value per param group from a list of one value (every group) or one per group (PyTorch's
/// float-or-list arguments); ConfigError naming `what` otherwise.
std::vector<double> per_group(const std::vector<double>& v, size_t groups, const std::string& what);
}  // namespace detail

}  // namespace volt
