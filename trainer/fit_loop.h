#pragma once
/// FitLoop: fit's epochs and batches (Lightning's _FitLoop and _TrainingEpochLoop): gradient
/// accumulation, the val-check schedule, the optimizer step and LR scheduler stepping, and the
/// progress a checkpoint saves so that a resumed fit continues mid-epoch. Its state (Stateful) is
/// the checkpoint's meta["loops"]: {batch_in_epoch, epoch, global_step, ...}.
///
/// [Note: whole accumulation windows]
/// The micro-batches of an open gradient accumulation window have gradients that no checkpoint
/// holds. What volt starts itself waits for the window's optimizer step: a stop signal ends fit at
/// the next window's first batch, the SLURM requeue saves after the step, ModelCheckpoint's
/// train_time_interval fires at a step. A checkpoint written inside a window all the same (a
/// validation every val_check_interval batches that is not a multiple of accumulate_grad_batches,
/// an error) records how many micro-batches ran, and a fit resumed from it warns that it goes on
/// without their gradients.
///
/// Ownership: borrows the options, Strategy, hook dispatcher, metrics, evaluation loop, the
/// Trainer's Optimization, stage and should_stop flag; owns the progress, which lasts
/// across fit calls. Thread-safety: the training thread only.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "volt/core/stateful.h"
#include "volt/module/data.h"
#include "volt/module/lightning_module.h"
#include "volt/strategies/strategy.h"
#include "volt/trainer/data_connector.h"
#include "volt/trainer/evaluation_loop.h"
#include "volt/trainer/hook_dispatcher.h"
#include "volt/trainer/metrics.h"
#include "volt/trainer/optimization.h"
#include "volt/trainer/trainer_options.h"
#include "volt/trainer/trainer_state.h"

namespace volt {

class FitLoop : public Stateful {
 public:
  FitLoop(const TrainerOptions& options, Strategy& strategy, HookDispatcher& hooks, Metrics& metrics,
          EvaluationLoop& evaluation, DataConnector& data, Optimization& optimization, RunningStage& stage,
          const bool& should_stop, const int64_t& accumulate_grad_batches)
      : options_(options),
        strategy_(strategy),
        hooks_(hooks),
        metrics_(metrics),
        evaluation_(evaluation),
        data_(data),
        optimization_(optimization),
        stage_(stage),
        should_stop_(should_stop),
        accumulate_(accumulate_grad_batches) {}

  /// Counts the training batches of an epoch (limit_train_batches); ConfigError if there are none.
  /// After a restore from `resumed_from` in the middle of an epoch, CheckpointError when the loader's
  /// batch_size or number of samples differs from the checkpoint's: the saved position (batches
  /// done) would point at other samples.
  void setup_data(DataLoader& train_loader, const std::string& resumed_from = "");
  /// Trains from the current progress until max_epochs, max_steps or should_stop (once min_epochs
  /// and min_steps are met), between the on_train_start and on_train_end hooks.
  void run(LightningModule& module, DataLoader& train_loader, const std::vector<DataLoader*>& val_loaders);

  /// New training and validation loaders (a data module's, attached to the strategy) for
  /// trainer.reload_dataloaders_every_n_epochs; unset: loaders are never reloaded.
  struct Loaders {
    DataLoader* train = nullptr;
    std::vector<DataLoader*> val;
  };
  void set_reload(std::function<Loaders()> reload) { reload_ = std::move(reload); }

  /// SLURM auto-requeue: when any rank received `signal`, every rank finishes the step, then
  /// `save_and_requeue` runs (collective; returns what it did) and fit ends with a TrainingError
  /// carrying that. signal 0 turns it off.
  void set_requeue(int signal, std::function<std::string()> save_and_requeue) {
    requeue_signal_ = signal;
    save_and_requeue_ = std::move(save_and_requeue);
  }

  /// After the last step: a stop signal received since the last check_step (during the last
  /// validation, save or hooks) ends fit with a TrainingError on every rank; the requeue signal is
  /// ignored there (nothing is left to run). Collective.
  void check_stop_after_fit();

  const FitProgress& progress() const { return progress_; }
  /// Whether the running fit validates: a validation loader with batches (limit_val_batches) on
  /// any rank; the same on every rank.
  bool enable_validation() const { return enable_validation_; }
  int64_t num_training_batches() const { return num_training_batches_; }
  /// Whether the batch that ran last left its gradient accumulation window open (its gradients
  /// wait for more micro-batches; no optimizer step yet).
  bool window_open() const { return window_open_; }

  /// {batch_in_epoch, epoch, global_step, batch_size, world_size, train_samples (a map-style
  /// loader's)}.
  YAML::Node state_dict() const override;
  /// Restores state_dict(); a missing batch_in_epoch means the start of the epoch.
  void load_state_dict(const YAML::Node& state) override;

 private:
  /// Stops training (TrainingError on every rank, naming the step and the rank) if the loss is nan
  /// or inf on any rank, or if any rank received SIGINT/SIGTERM (core/signals.h). Collective. An
  /// undefined loss (manual optimization may return none) counts as finite.
  /// `window_open`: micro-batches of this accumulation window already ran; a stop signal then waits
  /// for the window's step (the stop comes at the next window's first batch).
  void check_step(const torch::Tensor& loss, int64_t batch_idx, bool window_open);
  struct StepVerdict {
    int64_t bad, signalled, signal;
    bool any_signal = false, any_bad = false;
  };
  /// The ranks' agreement on this step: the lowest rank with a non-finite loss, the lowest rank
  /// that received a stop signal, and that signal. Collective.
  StepVerdict agree(bool finite);
  bool done() const;
  /// Whether min_epochs and min_steps are met (Lightning's _can_stop_early).
  bool min_reached() const;
  /// Loaders reloaded when reload_dataloaders_every_n_epochs says so (at an epoch's start).
  void maybe_reload(DataLoader*& train_loader, std::vector<DataLoader*>& val_loaders);
  /// One epoch from `start_batch`; sets progress_.epoch_done when its batches ran out.
  void run_epoch(DataLoader& train_loader, const std::vector<DataLoader*>& val_loaders, int64_t start_batch);
  void next_epoch();
  void run_validation(LightningModule& module, const std::vector<DataLoader*>& val_loaders);
  /// A resumed fit's validation (and step-interval plateau schedulers) that was due when its
  /// checkpoint was written, before anything else.
  void resume_pending(LightningModule& module, const std::vector<DataLoader*>& val_loaders);
  /// Whether any rank has a validation batch (limit_val_batches). Collective with several ranks.
  bool any_validation_batches(const std::vector<DataLoader*>& val_loaders) const;
  void optimizer_step_and_schedule(int64_t batch_idx);
  /// The end of a training epoch, whole or cut short by max_steps / should_stop (as Lightning):
  /// on_train_epoch_end hooks, then the epoch-level training metrics are logged.
  void end_epoch();

  const TrainerOptions& options_;
  Strategy& strategy_;
  HookDispatcher& hooks_;
  Metrics& metrics_;
  EvaluationLoop& evaluation_;
  DataConnector& data_;
  Optimization& optimization_;
  RunningStage& stage_;
  const bool& should_stop_;
  const int64_t& accumulate_;
  std::function<Loaders()> reload_;
  int64_t loaded_epoch_ = 0;  // the epoch the current loaders were made for
  bool min_warned_ = false;

  LightningModule* module_ = nullptr;  // during run()
  FitProgress progress_;
  int64_t num_training_batches_ = 0;
  bool enable_validation_ = false;
  /// What the position counts in: the training loader's batch_size per rank, the ranks, and the
  /// samples (-1: unknown).
  struct DataShape {
    int64_t batch_size = -1, world_size = 1, samples = -1;
    std::optional<bool> shuffle;  // unset: a checkpoint written before volt recorded the order
    uint64_t seed = 0;
    int64_t accumulated = 0;  // micro-batches of an open accumulation window (a checkpoint's)
    int64_t global_batch() const { return batch_size * world_size; }
  };
  DataShape data_shape_;            // this run's (setup_data)
  std::optional<DataShape> saved_;  // the restored checkpoint's, until setup_data checks it
  /// CheckpointError when the restored position is mid-epoch and `saved` differs from data_shape_.
  void check_resume_position(const DataShape& saved, const std::string& resumed_from) const;
  int requeue_signal_ = 0;
  std::function<std::string()> save_and_requeue_;
  bool requeue_pending_ = false;  // agreed by check_step; acted on at the end of the step
  bool stop_deferred_ = false;    // a stop signal waits for the accumulation window's step
  bool window_open_ = false;      // see window_open()
  /// The running batch's validation has no final metrics yet (a checkpoint now records it).
  bool validation_pending_ = false;
  bool scheduler_step_pending_ = false;  // its step-interval plateau schedulers have not stepped
  bool resume_validation_ = false, resume_scheduler_step_ = false;  // restored: run them first
};

}  // namespace volt
