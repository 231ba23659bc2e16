#pragma once
/// The Trainer: runs fit / validate / test for a LightningModule under a Strategy, with callbacks
/// and loggers, as Lightning's Trainer does. It is a thin owner of its parts: the FitLoop
/// (epochs, batches, optimizer steps), the EvaluationLoop (sanity check, validation, test), the
/// Metrics (LightningModule::log, epoch means, the logger's rows), the CheckpointConnector (save,
/// restore over Stateful objects) and the HookDispatcher (module and callback hooks, in order).
///
/// Ownership: the Trainer owns its Strategy, callbacks (shared), logger and parts. The module and
/// loaders are borrowed for the duration of a call. Thread-safety: use one Trainer from one thread.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "volt/callbacks/callback.h"
#include "volt/data/data_module.h"
#include "volt/loggers/csv_logger.h"
#include "volt/loggers/logger_collection.h"
#include "volt/module/data.h"
#include "volt/module/lightning_module.h"
#include "volt/profiler/profiler.h"
#include "volt/strategies/strategy.h"
#include "volt/trainer/checkpoint_connector.h"
#include "volt/trainer/data_connector.h"
#include "volt/trainer/evaluation_loop.h"
#include "volt/trainer/fit_loop.h"
#include "volt/trainer/hook_dispatcher.h"
#include "volt/trainer/metrics.h"
#include "volt/trainer/optimization.h"
#include "volt/trainer/predict_loop.h"
#include "volt/trainer/trainer_options.h"
#include "volt/trainer/trainer_state.h"

namespace volt {

class Trainer : public LogSink, public WrapHost, public ModuleHost {
 public:
  /// Validates `options` (ConfigError on bad values) and builds the strategy it names.
  explicit Trainer(TrainerOptions options, std::vector<std::shared_ptr<Callback>> callbacks = {});
  /// Uses a strategy built by the caller (options.strategy is ignored).
  Trainer(TrainerOptions options, std::unique_ptr<Strategy> strategy,
          std::vector<std::shared_ptr<Callback>> callbacks = {});
  ~Trainer() override;
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// Trains `module`; resumes from `ckpt_path` (a checkpoint file, or "last") when given. Each of
  /// fit / validate / test / predict ends with Strategy::finalize(), which throws DistributedError
  /// on every rank if a rank this process launched has failed.
  void fit(LightningModule& module, DataLoader& train_loader, DataLoader* val_loader = nullptr,
           const std::string& ckpt_path = "");
  /// fit with several validation loaders (validation_step gets dataloader_idx).
  void fit(LightningModule& module, DataLoader& train_loader, const DataLoaders& val_loaders,
           const std::string& ckpt_path = "");
  /// fit with the data module's loaders (prepare_data, setup("fit"), train and val dataloaders);
  /// the data module's state is saved in checkpoints.
  void fit(LightningModule& module, LightningDataModule& datamodule, const std::string& ckpt_path = "");

  /// Runs one validation epoch; returns the epoch-level metrics. `ckpt_path` (a volt checkpoint
  /// or "last") gives the weights to evaluate.
  std::map<std::string, double> validate(LightningModule& module, DataLoader& loader,
                                         const std::string& ckpt_path = "");
  std::map<std::string, double> validate(LightningModule& module, LightningDataModule& datamodule,
                                         const std::string& ckpt_path = "");
  std::map<std::string, double> test(LightningModule& module, DataLoader& loader, const std::string& ckpt_path = "");
  std::map<std::string, double> test(LightningModule& module, LightningDataModule& datamodule,
                                     const std::string& ckpt_path = "");

  /// Runs predict_step over the loader(s), each sample once across ranks; returns this rank's
  /// outputs in batch order (empty with return_predictions false: with a PredictionWriter, say).
  std::vector<Batch> predict(LightningModule& module, DataLoader& loader, const std::string& ckpt_path = "",
                             bool return_predictions = true);
  std::vector<Batch> predict(LightningModule& module, LightningDataModule& datamodule,
                             const std::string& ckpt_path = "", bool return_predictions = true);

  /// Runs `datamodule`'s prepare_data (global rank 0, the others waiting) and setup(stage) now,
  /// starting the strategy's processes if need be, for callers that need the data before the
  /// model exists (the CLI's links, e.g. a vocabulary size). The next fit / validate / test /
  /// predict with that data module and stage does not run them again. Collective.
  void prepare_data(LightningDataModule& datamodule, const std::string& stage);

  /// At the end of a program's work (after its last fit / validate / test / predict): on the
  /// process that launched this node's ranks (trainer.devices > 1 with no cluster launcher), waits
  /// until each launched rank has ended and throws DistributedError naming the first that failed,
  /// so a rank failing after rank 0 finished still fails the command (as torchrun reports a failed
  /// worker). A no-op on other ranks and on one device. The `volt` CLI calls it.
  void wait_for_ranks();

  /// Writes a checkpoint of the current state (every rank must call it). With
  /// `trainer.plugins: [AsyncCheckpointIO]`, during fit it returns once the state is copied aside
  /// and the file is written on a background thread (checkpoint/async_checkpoint_io.h).
  void save_checkpoint(const std::string& path, bool weights_only = false);
  /// Rewinds the running fit to `path`, a checkpoint save_checkpoint wrote during this fit: the
  /// module, the optimizers (their state cleared first, so state built since is dropped), the LR
  /// schedulers, the loop progress, the callbacks' states and the RNG states; the values logged since
  /// are dropped and should_stop is cleared. For a callback that trains ahead and rewinds
  /// (LearningRateFinder). Collective; during fit only (CheckpointError otherwise).
  void restore_checkpoint_in_fit(const std::string& path);
  /// Removes the checkpoint file or folder at `path` (Lightning's strategy.remove_checkpoint; call it
  /// on global rank 0), once the save in flight, if any, is complete on disk.
  void remove_checkpoint(const std::string& path);
  /// The checkpoint the running (or last) call restored from, resolved ("" when none), as
  /// Lightning's trainer.ckpt_path. ModelCheckpoint never removes it.
  const std::string& ckpt_path() const { return ckpt_path_; }

  // ---- state, as Lightning exposes it ------------------------------------------------------
  int64_t current_epoch() const { return fit_loop_.progress().epoch; }
  int64_t global_step() const { return fit_loop_.progress().global_step; }
  /// Whether the current epoch's batches ran out: true in on_train_epoch_end of a whole epoch,
  /// false there when max_steps, should_stop or a Timer ended the epoch early (a resumed
  /// fit goes on with the rest of it).
  bool epoch_finished() const { return fit_loop_.progress().epoch_done; }
  /// Whether the batch that ran last left its gradient accumulation window open: its gradients
  /// wait for more micro-batches and no optimizer step has taken them yet (a checkpoint written now
  /// does not hold them). Lightning's fit_loop._should_accumulate().
  bool accumulating_gradients() const { return fit_loop_.window_open(); }
  bool should_stop = false;
  /// Batches whose gradients add up before each optimizer step: trainer.accumulate_grad_batches at
  /// the start of each fit; a callback may change it in on_train_epoch_start (read after that hook,
  /// for the whole epoch), as Lightning's GradientAccumulationScheduler does.
  int64_t accumulate_grad_batches = 1;
  bool sanity_checking() const { return stage_ == RunningStage::Sanity; }
  bool training() const { return stage_ == RunningStage::Train; }
  int64_t num_training_batches() const { return fit_loop_.num_training_batches(); }
  /// Whether the running fit has a validation loop (a validation loader with batches), as
  /// Lightning's trainer.enable_validation.
  bool enable_validation() const { return fit_loop_.enable_validation(); }
  int64_t max_steps() const { return options_.max_steps; }
  int64_t max_epochs() const { return options_.effective_max_epochs(); }
  int64_t global_rank() const override { return strategy_->global_rank(); }
  int64_t world_size() const { return strategy_->world_size(); }
  bool is_global_zero() const { return strategy_->is_global_zero(); }
  const TrainerOptions& options() const { return options_; }
  /// Batches of each loop under fast_dev_run (0 when off), as Lightning's trainer.fast_dev_run.
  int64_t fast_dev_run() const { return options_.fast_dev_run.batches; }
  /// The profiler trainer.profiler names (nullptr when none); owned by the Trainer.
  Profiler* profiler() const { return profiler_.get(); }
  Strategy& strategy() { return *strategy_; }
  /// The first optimizer configure_optimizers returned (nullptr before fit set them up).
  torch::optim::Optimizer* optimizer() {
    return optimization_.empty() ? nullptr : optimization_.optimizers()[0].optimizer.get();
  }
  /// Every optimizer with its scheduler, in configure_optimizers' order (during and after fit).
  const Optimizers& optimizers() const { return optimization_.optimizers(); }
  LightningModule* module() { return module_; }
  /// The running fit's training loader (nullptr outside fit) and validation loaders.
  DataLoader* train_dataloader() { return train_loader_; }
  const std::vector<DataLoader*>& val_dataloaders() const { return val_loaders_; }
  std::vector<std::shared_ptr<Callback>>& callbacks() { return callbacks_; }
  /// Last value of every metric logged (step values, then epoch means once an epoch ends).
  const std::map<std::string, double>& callback_metrics() const { return metrics_.callback_metrics(); }
  const std::map<std::string, double>& progress_bar_metrics() const { return metrics_.progress_bar_metrics(); }
  /// The first logger's version directory ("" when logging is off or on ranks other than 0).
  std::string log_dir() const { return logger_ ? logger_->log_dir() : std::string(); }
  /// The first logger (Lightning's trainer.logger); nullptr when logging is off, before the first
  /// fit / validate / test, and on ranks other than 0.
  Logger* logger() { return loggers_.empty() ? nullptr : loggers_.front().get(); }
  /// Every logger, in order (Lightning's trainer.loggers); empty on ranks other than 0.
  const std::vector<std::shared_ptr<Logger>>& loggers() const { return loggers_; }
  /// Uses `loggers` (any Logger subclasses; empty: none) instead of the ones options.logger names.
  /// Call before the first fit / validate / test. Only global rank 0 uses them: CSVLogger and
  /// TensorBoardLogger create their version folder when constructed, so in a multi-process run
  /// construct them where is_global_zero().
  void set_loggers(std::vector<std::shared_ptr<Logger>> loggers);
  /// The resolved configuration saved beside the logs and in checkpoints (set by the CLI).
  void set_config(const YAML::Node& config) { config_ = config; }

  /// Called by LightningModule::log.
  void log_metric(const std::string& name, const torch::Tensor& value, const LogOptions& options) override;
  /// Called by LightningModule::wrap: the strategy's wrap.
  void wrap_unit(torch::nn::Module& module) override;
  /// Called by LightningModule::all_gather: the strategy's.
  torch::Tensor all_gather(const torch::Tensor& tensor, bool sync_grads) override;

 private:
  void setup(LightningModule& module, const std::string& stage);
  void add_default_callbacks(const std::string& stage);
  /// The module's configure_callbacks(), merged into the Trainer's as Lightning does: one of the
  /// same type replaces the Trainer's; checkpoint callbacks move to the end. Once per call.
  void add_module_callbacks(LightningModule& module);
  /// The module's prepare_data on global rank 0 (the others wait), once per Trainer and module.
  void prepare_module_data(LightningModule& module);
  /// The end of a call: logger flushed, teardown hooks, the strategy's teardown and finalize().
  void finish(LightningModule& module, const std::string& stage);
  /// SLURM auto-requeue at the end of a step: hpc_ckpt_<N>.ckpt, then `scontrol requeue` on rank 0.
  std::string save_and_requeue(LightningModule& module);
  void run_fit(LightningModule& module, LightningDataModule* datamodule, DataLoader* train_loader,
               std::vector<DataLoader*> val_loaders, const std::string& ckpt_path);
  std::map<std::string, double> run_evaluation(LightningModule& module, LightningDataModule* datamodule,
                                               std::vector<DataLoader*> loaders, RunningStage stage,
                                               const std::string& ckpt_path);
  std::vector<Batch> run_predict(LightningModule& module, LightningDataModule* datamodule,
                                 std::vector<DataLoader*> loaders, const std::string& ckpt_path, bool keep);

  /// Creates the profiler options.profiler names and lends it to the strategy and the hooks.
  void init_profiler();

  // Declaration order is construction order: the parts borrow the members above them.
  TrainerOptions options_;
  std::unique_ptr<Strategy> strategy_;
  std::unique_ptr<Profiler> profiler_;  // nullptr: profiling off
  std::vector<std::shared_ptr<Callback>> callbacks_;
  std::vector<std::shared_ptr<Logger>> loggers_;  // global rank 0 only
  bool loggers_given_ = false;                    // set_loggers() was called
  std::shared_ptr<Logger> logger_;                // the one logger, or a LoggerCollection of them
  YAML::Node config_;
  LightningModule* module_ = nullptr;
  LightningDataModule* datamodule_ = nullptr;  // the running call's (borrowed; nullptr without one)
  std::string ckpt_path_;                      // resolved, of the running or last call
  DataLoader* train_loader_ = nullptr;         // the running fit's (borrowed)
  std::vector<DataLoader*> val_loaders_;
  const LightningModule* data_prepared_for_ = nullptr;  // prepare_module_data ran for this module
  LightningDataModule* prepared_ = nullptr;             // prepared by prepare_data() for `prepared_stage_`
  std::string prepared_stage_;
  /// DataConnector::prepare unless prepare_data() already did it for this data module and stage.
  void prepare_once(LightningDataModule& datamodule, const std::string& stage);
  bool module_ready_ = false;
  RunningStage stage_ = RunningStage::None;

  HookDispatcher hooks_{*this, callbacks_};
  Optimization optimization_{options_, *strategy_, hooks_};
  Metrics metrics_{*strategy_};
  DataConnector data_connector_{*strategy_};
  EvaluationLoop evaluation_loop_{*strategy_, hooks_, metrics_, data_connector_, stage_};
  PredictLoop predict_loop_{*strategy_, hooks_, stage_};
  FitLoop fit_loop_{options_,        *strategy_,    hooks_, metrics_,    evaluation_loop_,
                    data_connector_, optimization_, stage_, should_stop, accumulate_grad_batches};
  CheckpointConnector checkpoint_connector_{*this,  options_,  *strategy_,    callbacks_,
                                            hooks_, fit_loop_, optimization_, config_};
};

}  // namespace volt
