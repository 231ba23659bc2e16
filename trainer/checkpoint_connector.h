#pragma once
/// CheckpointConnector: the Trainer's checkpoint dump and restore (Lightning's checkpoint
/// connector). Resolves ckpt_path "last" and "best", builds the checkpoint header (versions, strategy,
/// precision, world size, hyper-parameters, config, the hooks' `extra`) and hands it to the
/// Strategy, which writes the model and optimizer; on resume it has the Strategy read them back.
///
/// Everything else a resumed run needs is a Stateful, saved under a key of the metadata:
///   "loops"                 the FitLoop's progress (also with weights_only)
///   "lr_schedulers"         the LR schedulers' state_dict with their name (when there is one; a list
///                           with several optimizers; also with weights_only)
///   "optimizers"            each optimizer's param-group hyper-parameters (lr, betas, ...)
///   "callbacks/<state_key>" each callback, at meta["callbacks"][state_key]
///   "grad_scaler"           the Precision's loss scaler (when there is one)
///   "datamodule"            the LightningDataModule given to fit (when there is one)
/// RNG states are tensors, not YAML: they travel in the header's rng_states (one set per rank).
///
/// With `trainer.plugins: [AsyncCheckpointIO]`, the saves of a running fit are asynchronous
/// (checkpoint/async_checkpoint_io.h): save() returns once the state is copied aside, and the file
/// is written while training goes on; the next save and the end of fit wait for it.
///
/// Ownership: borrows the Trainer (for "last" and the hooks), its options, Strategy, callbacks,
/// hook dispatcher, fit loop, Optimization and config; owns the AsyncCheckpointIO. Thread-safety:
/// the training thread only; save and restore are collective (every rank calls them).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "volt/callbacks/callback.h"
#include "volt/core/stateful.h"
#include "volt/data/data_module.h"
#include "volt/module/lightning_module.h"
#include "volt/strategies/strategy.h"
#include "volt/trainer/fit_loop.h"
#include "volt/trainer/hook_dispatcher.h"
#include "volt/trainer/optimization.h"
#include "volt/trainer/trainer_options.h"

namespace volt {

class AsyncCheckpointIO;

class CheckpointConnector {
 public:
  CheckpointConnector(Trainer& trainer, const TrainerOptions& options, Strategy& strategy,
                      std::vector<std::shared_ptr<Callback>>& callbacks, HookDispatcher& hooks, FitLoop& fit_loop,
                      Optimization& optimization, const YAML::Node& config);
  /// Waits for an asynchronous save still being written (this rank's thread only).
  ~CheckpointConnector();

  /// `ckpt_path`; for "last" the last.ckpt a ModelCheckpoint wrote, for "best" the first
  /// ModelCheckpoint's best_model_path, as Lightning (CheckpointError if there is none).
  std::string resolve_ckpt_path(const std::string& ckpt_path) const;
  /// The first ModelCheckpoint's best_model_path; CheckpointError when there is no ModelCheckpoint
  /// or it saved no checkpoint yet.
  std::string find_best() const;
  /// The last.ckpt a ModelCheckpoint wrote ("" when there is none yet).
  std::string find_last() const;
  /// Restores the module, optimizer and every Stateful from `ckpt_path` (or "last", "best"), then
  /// calls the on_load_checkpoint hooks. A rank that cannot read fails every rank (CheckpointError).
  /// The callbacks' states are restored only when `fitting`, as Lightning's restore_callbacks: a
  /// validate / test / predict leaves them as the Trainer's fit left them (best_model_path stays).
  void restore(LightningModule& module, const std::string& ckpt_path, bool fitting);
  /// Writes a checkpoint at `path`; weights_only leaves out the optimizer, callbacks, scaler and RNG.
  void save(LightningModule& module, const std::string& path, bool weights_only);
  /// With the AsyncCheckpointIO plugin, makes the saves until wait_for_saves() or abandon_saves()
  /// asynchronous (the Trainer calls it when fit starts); without it, a no-op.
  void begin_async_saves();
  /// Collective. Waits until the pending asynchronous save is complete on disk on every rank
  /// (CheckpointError naming the file on every rank if its write failed), runs the removals
  /// remove_checkpoint() deferred, and makes saves synchronous again. A no-op without one.
  void wait_for_saves();
  /// After an exception (no collective): waits for this rank's writing thread, completes what
  /// needs no other rank (AsyncCheckpointIO::abandon) and makes saves synchronous again. Never throws.
  void abandon_saves() noexcept;
  /// Removes the checkpoint file or folder at `path` on this rank (call it on rank 0), once the
  /// pending asynchronous save is complete: never before the checkpoint replacing it is whole.
  /// At once when no save is pending.
  void remove_checkpoint(const std::string& path);
  /// The data module of the running fit (nullptr: none), saved and restored under "datamodule".
  /// Forgets what release_datamodule() kept.
  void set_datamodule(LightningDataModule* datamodule);
  /// At the end of a fit: keeps the data module's hparams() and state_dict() as they are now, which
  /// a later Trainer::save_checkpoint writes (as Lightning's, whose trainer keeps its datamodule),
  /// and lets go of the data module itself (borrowed for the call only).
  void release_datamodule();

 private:
  /// The callbacks' states (by state key, or an earlier version's key); warns (rank 0) naming the
  /// states in `meta` no callback of this fit took.
  void restore_callback_states(const YAML::Node& meta, const std::string& path);
  /// A Stateful and where it lives in the metadata: meta[section], or meta[section][name].
  struct Entry {
    std::string section;
    std::string name;  // "" = the whole section
    Stateful* state;
    bool with_weights_only;  // saved by a weights-only checkpoint too
  };
  /// Every Stateful in saving order (loops, lr_schedulers, callbacks, grad_scaler).
  std::vector<Entry> entries();

  /// The LR schedulers of the optimizers as a Stateful (a list with several optimizers).
  class SchedulerState : public Stateful {
   public:
    explicit SchedulerState(Optimization& optimization) : optimization_(optimization) {}
    YAML::Node state_dict() const override;
    void load_state_dict(const YAML::Node& state) override;

   private:
    Optimization& optimization_;
  };
  /// Each optimizer's param-group hyper-parameters (checkpoint/optimizer_hparams.h).
  class OptimizerHparamsState : public Stateful {
   public:
    explicit OptimizerHparamsState(Optimization& optimization) : optimization_(optimization) {}
    YAML::Node state_dict() const override;
    void load_state_dict(const YAML::Node& state) override;

   private:
    Optimization& optimization_;
  };

  /// On rank 0, warns naming each param-group hyper-parameter (lr, weight_decay, ...) whose value
  /// in `saved` (the checkpoint's "optimizers") differs from this run's optimizer: the checkpoint's
  /// wins. The lr of an optimizer with an LR scheduler is not compared (the scheduler moved it).
  void warn_changed_optimizer_hparams(const YAML::Node& saved, const std::string& path) const;
  /// This rank's random generators as the checkpoint saved them (kept out of Stateful: tensors).
  void restore_rng(const CheckpointReader& reader);

  Trainer& trainer_;
  const TrainerOptions& options_;
  Strategy& strategy_;
  std::vector<std::shared_ptr<Callback>>& callbacks_;
  HookDispatcher& hooks_;
  FitLoop& fit_loop_;
  Optimization& optimization_;
  const YAML::Node& config_;
  SchedulerState scheduler_state_;
  OptimizerHparamsState optimizer_hparams_;
  LightningDataModule* datamodule_ = nullptr;
  /// The data module's state at the end of the last fit (see release_datamodule).
  struct DataModuleSnapshot : Stateful {
    YAML::Node hparams, state;
    YAML::Node state_dict() const override { return state; }
    void load_state_dict(const YAML::Node&) override {}  // only a fit's own data module is restored
  };
  std::optional<DataModuleSnapshot> kept_datamodule_;
  std::unique_ptr<AsyncCheckpointIO> async_;  // set between begin_async_saves() and the wait
};

}  // namespace volt
