#pragma once
/// The Trainer: runs fit / validate / test loops for a LightningModule under a Strategy, with
/// callbacks and a CSV logger, as Lightning's Trainer does.
///
/// Ownership: the Trainer owns its Strategy, callbacks (shared) and logger. The module and loaders
/// are borrowed for the duration of a call. Thread-safety: use one Trainer from one thread.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "volt/callbacks/callback.h"
#include "volt/loggers/csv_logger.h"
#include "volt/strategies/strategy.h"
#include "volt/trainer/data.h"
#include "volt/trainer/lightning_module.h"
#include "volt/trainer/trainer_options.h"

namespace volt {

class Trainer {
 public:
  /// Validates `options` (ConfigError on bad values) and builds the strategy it names.
  explicit Trainer(TrainerOptions options, std::vector<std::shared_ptr<Callback>> callbacks = {});
  /// Uses a strategy built by the caller (options.strategy is ignored).
  Trainer(TrainerOptions options, std::unique_ptr<Strategy> strategy,
          std::vector<std::shared_ptr<Callback>> callbacks = {});
  ~Trainer();

  /// Trains `module`; resumes from `ckpt_path` (a checkpoint file, or "last") when given.
  void fit(LightningModule& module, DataLoader& train_loader, DataLoader* val_loader = nullptr,
           const std::string& ckpt_path = "");
  /// Runs one validation epoch; returns the epoch-level metrics.
  std::map<std::string, double> validate(LightningModule& module, DataLoader& loader, const std::string& ckpt_path = "");
  std::map<std::string, double> test(LightningModule& module, DataLoader& loader, const std::string& ckpt_path = "");

  /// Writes a checkpoint of the current state (every rank must call it).
  void save_checkpoint(const std::string& path, bool weights_only = false);

  // ---- state, as Lightning exposes it ------------------------------------------------------
  int64_t current_epoch() const { return current_epoch_; }
  int64_t global_step() const { return global_step_; }
  bool should_stop = false;
  bool sanity_checking() const { return stage_ == Stage::Sanity; }
  bool training() const { return stage_ == Stage::Train; }
  int64_t num_training_batches() const { return num_training_batches_; }
  int64_t max_steps() const { return options_.max_steps; }
  int64_t max_epochs() const { return options_.effective_max_epochs(); }
  int64_t global_rank() const { return strategy_->global_rank(); }
  int64_t world_size() const { return strategy_->world_size(); }
  bool is_global_zero() const { return strategy_->is_global_zero(); }
  const TrainerOptions& options() const { return options_; }
  Strategy& strategy() { return *strategy_; }
  torch::optim::Optimizer* optimizer() { return opt_config_.optimizer.get(); }
  const OptimizerConfig& optimizer_config() const { return opt_config_; }
  LightningModule* module() { return module_; }
  std::vector<std::shared_ptr<Callback>>& callbacks() { return callbacks_; }
  /// Last value of every metric logged (step values, then epoch means once an epoch ends).
  const std::map<std::string, double>& callback_metrics() const { return callback_metrics_; }
  const std::map<std::string, double>& progress_bar_metrics() const { return progress_bar_metrics_; }
  /// The logger's version directory ("" when logging is off or on ranks other than 0).
  std::string log_dir() const { return logger_ ? logger_->log_dir() : std::string(); }
  CSVLogger* logger() { return logger_.get(); }
  /// The resolved configuration saved beside the logs and in checkpoints (set by the CLI).
  void set_config(const YAML::Node& config) { config_ = config; }

  /// Called by LightningModule::log.
  void log_metric(const std::string& name, const torch::Tensor& value, const LogOptions& options);

 private:
  enum class Stage { None, Sanity, Train, Validate, Test };
  void setup(LightningModule& module, const std::string& stage);
  void finish(LightningModule& module, const std::string& stage);
  void train_epoch(DataLoader& train_loader, DataLoader* val_loader, int64_t start_batch);
  void optimizer_step_and_schedule();
  void run_eval(DataLoader& loader, Stage stage, int64_t max_batches);
  bool done() const;
  void restore(const std::string& ckpt_path);
  std::string resolve_ckpt_path(const std::string& ckpt_path) const;
  void flush_step_metrics();
  /// Running (sum, count) of each on_epoch metric of one loop.
  using EpochAccum = std::map<std::string, std::pair<double, int64_t>>;
  /// The means of `accum` into callback_metrics (also "x" for "x_epoch"); returns them.
  std::map<std::string, double> publish_epoch_metrics(const EpochAccum& accum);
  /// Publishes the means, logs them as one row at the current step and clears `accum`.
  std::map<std::string, double> finish_epoch_metrics(EpochAccum& accum);
  /// The end of a training epoch, whole or cut short by max_steps / should_stop (as Lightning):
  /// on_train_epoch_end hooks, then the epoch-level training metrics are logged.
  void end_train_epoch();
  template <class F>
  void call_callbacks(F&& f);

  TrainerOptions options_;
  std::unique_ptr<Strategy> strategy_;
  std::vector<std::shared_ptr<Callback>> callbacks_;
  std::unique_ptr<CSVLogger> logger_;
  YAML::Node config_;

  LightningModule* module_ = nullptr;
  OptimizerConfig opt_config_;
  bool module_ready_ = false;
  Stage stage_ = Stage::None;
  int64_t current_epoch_ = 0;
  int64_t global_step_ = 0;
  int64_t batch_in_epoch_ = 0;  // batches finished in the current epoch (for mid-epoch resume)
  int64_t num_training_batches_ = 0;
  DataLoader* val_loader_ = nullptr;

  std::map<std::string, double> step_metrics_;
  // Training and evaluation (validation / test) accumulate epoch metrics separately: a validation
  // run in the middle of a training epoch neither resets nor logs the training epoch's values.
  EpochAccum train_epoch_accum_;
  EpochAccum eval_epoch_accum_;
  std::map<std::string, double> callback_metrics_;
  std::map<std::string, double> progress_bar_metrics_;
};

}  // namespace volt
