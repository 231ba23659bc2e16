#pragma once
/// ReduceLROnPlateau: torch.optim.lr_scheduler.ReduceLROnPlateau, stepped with a metric (Lightning:
/// OptimizerConfig::monitor names it, e.g. "val_loss"). Ownership and thread-safety as LRScheduler.
#include <cstdint>
#include <string>
#include <vector>

#include "volt/optim/lr_schedulers/lr_scheduler_base.h"

namespace volt {

/// ReduceLROnPlateau's arguments, with PyTorch's names and defaults.
struct ReduceLROnPlateauOptions {
  std::string mode = "min";  ///< "min": the metric should fall (a loss); "max": rise (an accuracy)
  double factor = 0.1;       ///< new lr = lr * factor, in [0, 1)
  int64_t patience = 10;     ///< steps without improvement tolerated before a reduction
  double threshold = 1e-4;   ///< what counts as an improvement (see threshold_mode)
  /// "rel": better than best * (1 -/+ threshold); "abs": better than best -/+ threshold.
  std::string threshold_mode = "rel";
  int64_t cooldown = 0;                ///< steps after a reduction during which bad steps are not counted
  std::vector<double> min_lr = {0.0};  ///< the floor: one value for every group, or one per group
  double eps = 1e-8;                   ///< a reduction smaller than eps is skipped

  template <class V>
  void visit(V& v) {
    v("mode", mode)("factor", factor)("patience", patience)("threshold", threshold)("threshold_mode", threshold_mode)(
        "cooldown", cooldown)("min_lr", min_lr)("eps", eps);
  }
};

/// Reduces every param group's lr by `factor` once the metric has not improved for more than
/// `patience` steps. The lrs start at the optimizer's (construction changes nothing).
class ReduceLROnPlateau : public LRScheduler {
 public:
  explicit ReduceLROnPlateau(torch::optim::Optimizer& opt, ReduceLROnPlateauOptions options = {});
  std::string name() const override { return "ReduceLROnPlateau"; }
  bool needs_metric() const override { return true; }
  /// ConfigError: this scheduler steps with a metric, step(metric).
  void step() override;
  /// One step with the monitored value (a nan counts as no improvement).
  void step(double metric) override;
  /// Moves the step counter only; the lrs stay (they depend on the metrics seen).
  void set_last_epoch(int64_t epoch) override;
  YAML::Node state_dict() const override;
  void load_state_dict(const YAML::Node& state) override;

  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_epochs_; }
  int64_t cooldown_counter() const { return cooldown_counter_; }

 protected:
  std::vector<double> get_lr() override { return current_lrs(); }

 private:
  bool is_better(double a, double best) const;

  ReduceLROnPlateauOptions options_;
  bool max_mode_ = false;
  bool abs_threshold_ = false;
  std::vector<double> min_lrs_;
  double best_;
  int64_t num_bad_epochs_ = 0;
  int64_t cooldown_counter_ = 0;
};

}  // namespace volt
