#pragma once
/// LearningRateFinder: Lightning's learning-rate range test, run at on_fit_start. It trains
/// num_training_steps optimizer steps with the lr raised each step from min_lr to max_lr
/// ("exponential" or "linear"), records the smoothed loss (a running mean with beta 0.98, corrected
/// for its start), and stops early once the smoothed loss exceeds early_stop_threshold x the best
/// so far (or is not finite). Then it rewinds the fit to before the search (module, optimizer state,
/// LR schedulers, loop progress, callbacks' states, RNG: a temporary checkpoint under
/// default_root_dir, restored with Trainer::restore_checkpoint_in_fit and removed), computes the
/// suggestion (the lr at the steepest descent of the smoothed loss, skipping the first 10 points
/// and the last one, as Lightning), and with update_attr sets it as the lr of every param group of
/// every optimizer (and as hparams()[attr_name] when attr_name is given). Rank 0 writes the curve as
/// lr_find.png (lr on a log axis for "exponential", loss upwards, the suggestion as a red disc; no
/// text) into the logger's log_dir, or default_root_dir without a logger.
///
/// Requirements: automatic optimization and one optimizer (ConfigError otherwise). An LR scheduler
/// keeps its own base lr: its next step replaces the suggestion (a warning says so). Skipped under
/// fast_dev_run. Under several ranks each rank trains on its own batches; rank 0's losses decide.
///
/// Thread-safety: the training thread only (hooks).
#include <optional>
#include <string>
#include <vector>

#include "volt/callbacks/callback.h"
#include "volt/core/errors.h"

namespace volt {

struct LearningRateFinderOptions {
  double min_lr = 1e-8;
  double max_lr = 1.0;
  int64_t num_training_steps = 100;
  std::string mode = "exponential";
  std::optional<double> early_stop_threshold = 4.0;  // null: never stop early
  bool update_attr = true;
  std::string attr_name;

  template <class V>
  void visit(V& v) {
    v("min_lr", min_lr)("max_lr", max_lr)("num_training_steps", num_training_steps)("mode", mode)(
        "early_stop_threshold", early_stop_threshold)("update_attr", update_attr)("attr_name", attr_name);
  }
  void validate(const std::string& prefix = "LearningRateFinder") const;
};

class LearningRateFinder : public Callback {
 public:
  using Options = LearningRateFinderOptions;
  explicit LearningRateFinder(Options options = {});
  std::string state_key() const override { return "LearningRateFinder"; }

  /// The search (see the file comment). Collective.
  void on_fit_start(Trainer& trainer, LightningModule& module) override;

  /// The lr of each step of the last search, and its smoothed loss (rank 0's, on every rank).
  const std::vector<double>& lrs() const { return lrs_; }
  const std::vector<double>& losses() const { return losses_; }
  /// Lightning's suggestion over the last search: the lr where the smoothed loss falls fastest
  /// (torch.gradient over lrs[skip_begin:-skip_end], non-finite losses left out); nullopt with fewer
  /// than 2 points left.
  std::optional<double> suggestion(int64_t skip_begin = 10, int64_t skip_end = 1) const;
  /// The index into lrs() of suggestion(skip_begin, skip_end) (nullopt likewise).
  std::optional<int64_t> optimal_index(int64_t skip_begin = 10, int64_t skip_end = 1) const;
  /// The suggestion applied by the last search (nullopt: none, or update_attr off).
  std::optional<double> optimal_lr() const { return optimal_lr_; }
  /// The plot the last search wrote ("" on ranks other than 0 or when none was written).
  const std::string& plot_path() const { return plot_path_; }

  /// The lr of step `step` (0-based) of a search, Lightning's _ExponentialLR / _LinearLR.
  double lr_at(int64_t step) const;

 private:
  void search(Trainer& trainer, LightningModule& module);
  void apply(Trainer& trainer, LightningModule& module, double lr);
  void plot(const std::string& path) const;
  Options options_;
  std::vector<double> lrs_, losses_;
  bool interrupted_ = false;  // the last search ended by a stop signal
  std::optional<double> optimal_lr_;
  std::string plot_path_;
};

}  // namespace volt
