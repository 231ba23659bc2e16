#pragma once
/// Metrics: where LightningModule::log's values go (Lightning's logger connector). Keeps the step
/// values until the next logged row, accumulates epoch means (training and evaluation apart: a
/// validation run in the middle of a training epoch neither resets nor logs the training epoch's
/// values), publishes both to callback_metrics / progress_bar_metrics, and writes rows to the CSV
/// logger.
///
/// Ownership: borrows the Strategy (sync_dist all-reduces) and the logger (owned by the Trainer;
/// null when logging is off or on ranks other than 0). Thread-safety: the training thread only.
#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "volt/loggers/csv_logger.h"
#include "volt/module/lightning_module.h"
#include "volt/strategies/strategy.h"
#include "volt/trainer/trainer_state.h"

namespace volt {

class Metrics {
 public:
  /// Which epoch accumulator: the training epoch's, or the current validation / test epoch's.
  enum class Loop { Train, Eval };

  explicit Metrics(Strategy& strategy) : strategy_(strategy) {}
  void set_logger(CSVLogger* logger) { logger_ = logger; }
  /// The evaluation loader now running, of `count`: with several, every name logged gets
  /// Lightning's "/dataloader_idx_<idx>" suffix, so each loader has its own epoch means.
  void set_dataloader(int64_t idx, int64_t count) {
    dataloader_idx_ = idx;
    num_dataloaders_ = count;
  }

  /// One LightningModule::log call while `stage` runs (ignored during the sanity check). on_step and
  /// on_epoch default by stage; with both, the values are "<name>_step" and "<name>_epoch".
  void log(const std::string& name, const torch::Tensor& value, const LogOptions& options, RunningStage stage);
  /// Writes the step values logged since the last row as one row at step global_step - 1.
  void flush_step_metrics(const FitProgress& progress);
  /// Forgets the epoch values of `loop` logged so far.
  void reset_epoch(Loop loop) { accum(loop).clear(); }
  /// The epoch means of `loop` into callback_metrics (also "x" for "x_epoch"); returns them.
  std::map<std::string, double> publish_epoch(Loop loop);
  /// Publishes the means, logs them as one row at the current step and resets `loop`.
  std::map<std::string, double> finish_epoch(Loop loop, const FitProgress& progress);

  /// Last value of every metric logged (step values, then epoch means once an epoch ends).
  const std::map<std::string, double>& callback_metrics() const { return callback_metrics_; }
  const std::map<std::string, double>& progress_bar_metrics() const { return progress_bar_metrics_; }

 private:
  /// Running (sum, count) of each on_epoch metric of one loop.
  using EpochAccum = std::map<std::string, std::pair<double, int64_t>>;
  EpochAccum& accum(Loop loop) { return loop == Loop::Train ? train_epoch_accum_ : eval_epoch_accum_; }

  Strategy& strategy_;
  CSVLogger* logger_ = nullptr;
  int64_t dataloader_idx_ = 0, num_dataloaders_ = 1;
  std::map<std::string, double> step_metrics_;
  EpochAccum train_epoch_accum_;
  EpochAccum eval_epoch_accum_;
  std::map<std::string, double> callback_metrics_;
  std::map<std::string, double> progress_bar_metrics_;
};

}  // namespace volt
