#pragma once
/// Metrics: where LightningModule::log's values go (Lightning's logger connector and its
/// _ResultCollection). Keeps the step values until the next logged row, reduces epoch values by
/// each name's reduce_fx (training and evaluation apart: a validation run in the middle of a
/// training epoch neither resets nor logs the training epoch's values), publishes both to
/// callback_metrics / progress_bar_metrics, and writes rows to the logger.
///
/// Values stay tensors on their device (detached copies; a CPU tensor stays on the CPU): log()
/// never waits for the device. They become numbers only when a row is written to the logger,
/// when callback_metrics() / progress_bar_metrics() are read, and at the end of an epoch — each
/// time in one transfer per device for every value waiting. Reading the maps performs no
/// collective, so one rank may read them alone; the reductions over ranks (sync_dist) happen in
/// log() for step values and in publish_epoch / finish_epoch, which every rank calls.
///
/// Ownership: borrows the Strategy (sync_dist all-reduces) and the logger (owned by the Trainer;
/// null when logging is off or on ranks other than 0). Thread-safety: the training thread only
/// (the const readers update the cached maps).
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "volt/loggers/logger.h"
#include "volt/module/lightning_module.h"
#include "volt/strategies/strategy.h"
#include "volt/trainer/trainer_state.h"

namespace volt {

namespace detail {
/// Named scalars kept as tensors until read: get() converts every tensor set since the last read
/// in one transfer per device. Thread-safety: one thread.
class LazyScalars {
 public:
  explicit LazyScalars(int64_t& transfers) : transfers_(transfers) {}
  /// `value`: a 0-dim double tensor, on any device.
  void set(const std::string& name, const torch::Tensor& value) { pending_[name] = value; }
  void set(const std::string& name, double value) {
    pending_.erase(name);
    values_[name] = value;
  }
  const std::map<std::string, double>& get() const;

 private:
  int64_t& transfers_;
  mutable std::map<std::string, double> values_;
  mutable std::map<std::string, torch::Tensor> pending_;
};

/// The values of `tensors` (0-dim double tensors) as numbers: one device-to-host copy per device
/// (counted in `transfers`).
std::map<std::string, double> to_host(const std::map<std::string, torch::Tensor>& tensors, int64_t& transfers);
}  // namespace detail

class Metrics {
 public:
  /// Which epoch accumulator: the training epoch's, or the current validation / test epoch's.
  enum class Loop { Train, Eval };

  explicit Metrics(Strategy& strategy) : strategy_(strategy) {}
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  void set_logger(Logger* logger) { logger_ = logger; }
  /// The evaluation loader now running, of `count`: with several, every name logged gets
  /// Lightning's "/dataloader_idx_<idx>" suffix, so each loader has its own epoch means.
  void set_dataloader(int64_t idx, int64_t count) {
    dataloader_idx_ = idx;
    num_dataloaders_ = count;
  }
  /// The batch the steps now run on: its size weighs "mean" epoch values logged without
  /// LogOptions::batch_size (Lightning's extract_batch_size: the first tensor's first dimension,
  /// positional fields first, then named and nested ones; 1 for a 0-dim tensor). Reads shapes only.
  /// Forgotten when an epoch's values are published (epoch-end hooks weigh 1).
  void set_batch(const Batch& batch);
  /// While on, log() only takes part in its collectives and records no value: the step runs on a
  /// stand-in batch (a rank whose share of an unpadded evaluation ran out, see EvaluationLoop). An
  /// epoch name logged then is still registered, with a neutral value, so every rank reduces the
  /// same names at the end of the epoch (a rank that only ran stand-ins would otherwise skip the
  /// collectives the others wait in).
  void set_discard(bool on) { discard_ = on; }

  /// One LightningModule::log call while `stage` runs (checked, then ignored during the sanity
  /// check). on_step and on_epoch default by stage; with both, the values are "<name>_step" and
  /// "<name>_epoch". A sync_dist step value is reduced over ranks here (a collective).
  void log(const std::string& name, const torch::Tensor& value, const LogOptions& options, RunningStage stage);
  /// Writes the step values logged since the last row (those with LogOptions::logger) as one row at
  /// step global_step - 1.
  void flush_step_metrics(const FitProgress& progress);
  /// Forgets the epoch values of `loop` logged so far.
  void reset_epoch(Loop loop);
  /// The epoch values of `loop` (reduced over ranks where sync_dist: a collective, so every rank
  /// calls it) into callback_metrics, as "x_epoch" and "x" for a name logged on step and epoch,
  /// and into progress_bar_metrics for prog_bar names. The values stay on their device.
  void publish_epoch(Loop loop);
  /// Publishes the epoch values, logs those with LogOptions::logger as one row at the current
  /// step, resets `loop`, and returns every epoch value (also logger=false ones) by name.
  std::map<std::string, double> finish_epoch(Loop loop, const FitProgress& progress);

  /// Last value of every metric logged (step values, then epoch values once an epoch ends).
  /// Converts the values logged since the last read (one transfer per device); no collective.
  /// The reference stays valid, but shows later values only once read again through here.
  const std::map<std::string, double>& callback_metrics() const { return callback_.get(); }
  const std::map<std::string, double>& progress_bar_metrics() const { return progress_bar_.get(); }
  /// Device-to-host transfers made so far: each converts every value waiting on one device.
  int64_t host_transfers() const { return transfers_; }

 private:
  /// One on_epoch name of one loop: its reduction so far.
  struct EpochValue {
    std::string name;  // as logged (with the dataloader suffix): callback_metrics gets it too
    ReduceFx fx = ReduceFx::Mean;
    bool sync = false, logger = true, prog_bar = false;
    torch::Tensor value;  // mean: sum of value * batch size; sum; max; min (0-dim double)
    double weight = 0;    // mean: the sum of the batch sizes
    bool real = false;    // a value from a real batch was added (not only stand-ins)
  };
  /// What `loop` logged this epoch: the epoch values, each name's reduce_fx, and which name
  /// produced each output name ("x_step", "x_epoch", "x"), to catch collisions.
  struct EpochState {
    std::map<std::string, EpochValue> values;  // by output name
    std::map<std::string, ReduceFx> fx;        // by logged name
    std::map<std::string, std::string> owner;  // output name -> logged name
    void clear() {
      values.clear();
      fx.clear();
      owner.clear();
    }
  };
  EpochState& state(Loop loop) { return loop == Loop::Train ? train_ : eval_; }
  /// The epoch value of each output name of `loop`, reduced over ranks where asked.
  std::map<std::string, torch::Tensor> compute(Loop loop);
  /// The entry for `epoch_name` of `s`, created holding `fx`'s neutral value where new.
  static EpochValue& epoch_value(EpochState& s, const std::string& epoch_name, const std::string& name, ReduceFx fx,
                                 const torch::Tensor& like);
  /// Claims `output` for `name` this epoch; ConfigError when another name produces it.
  static void claim(EpochState& s, const std::string& output, const std::string& name);

  Strategy& strategy_;
  Logger* logger_ = nullptr;
  int64_t dataloader_idx_ = 0, num_dataloaders_ = 1;
  std::optional<int64_t> batch_size_;  // of the current batch; -1: it holds no tensor
  int64_t transfers_ = 0;
  bool discard_ = false;
  std::map<std::string, torch::Tensor> step_metrics_;  // for the next logged row
  EpochState train_, eval_;
  detail::LazyScalars callback_{transfers_};
  detail::LazyScalars progress_bar_{transfers_};
};

}  // namespace volt
