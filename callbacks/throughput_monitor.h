#pragma once
/// ThroughputMonitor: batches, samples, items (tokens) and FLOPs per second, and the model FLOPs
/// utilization (MFU), over a sliding window of optimizer steps, as Lightning's ThroughputMonitor.
/// Logged to the loggers every log_every_n_steps (rank 0), with Lightning's names:
///   train/time, train/batches, train/samples, train/lengths          (totals since train start)
///   train/device/batches_per_sec, train/device/samples_per_sec,      (this rank, once the window
///   train/device/items_per_sec, train/device/flops_per_sec,           is full)
///   train/device/mfu
///   train/batches_per_sec, train/samples_per_sec, train/items_per_sec, train/flops_per_sec
///                                                                    (all ranks, when world_size > 1)
/// Samples per batch: the first tensor's first dimension unless `batch_size_fn` is given. Items
/// per second are samples per second times the mean length of a sample: `length_fn` gives a
/// batch's sample length, by default the first tensor's second dimension (the tokens of a
/// [batch, seq] batch); 1-dimensional batches count no items. FLOPs of one batch on one device:
/// the module's, if it derives from FlopsPerBatch, else options.flops_per_batch; MFU also needs
/// options.available_flops (peak FLOP/s of one device: no default, so no MFU unless given). Time
/// spent in validation is not counted as training time.
///
/// Ownership: a callback (shared). Thread-safety: hooks run on the training thread.
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "volt/callbacks/callback.h"
#include "volt/core/errors.h"

namespace volt {

/// A module that knows its FLOPs per training batch on one device (forward + backward), e.g.
/// 6 * parameters * tokens for a Transformer. Mix it into a LightningModule.
class FlopsPerBatch {
 public:
  virtual ~FlopsPerBatch() = default;
  virtual double flops_per_batch() const = 0;
};

struct ThroughputMonitorOptions {
  int64_t window_size = 100;              ///< steps in the sliding window (>= 2)
  std::optional<double> available_flops;  ///< peak FLOP/s of one device, for MFU
  std::optional<double> flops_per_batch;  ///< FLOPs of one batch on one device (when the module has none)
  std::string separator = "/";
  int64_t log_every_n_steps = 0;  ///< 0 = the Trainer's log_every_n_steps

  template <class V>
  void visit(V& v) {
    v("window_size", window_size)("available_flops", available_flops)("flops_per_batch", flops_per_batch)(
        "separator", separator)("log_every_n_steps", log_every_n_steps);
  }
  void validate(const std::string& prefix = "ThroughputMonitor") const {
    VOLT_CHECK(window_size >= 2, ConfigError, "config key '", prefix, ".window_size': must be >= 2, got ", window_size);
    VOLT_CHECK(!available_flops || *available_flops > 0, ConfigError, "config key '", prefix,
               ".available_flops': must be > 0");
    VOLT_CHECK(!flops_per_batch || *flops_per_batch >= 0, ConfigError, "config key '", prefix,
               ".flops_per_batch': must be >= 0");
    VOLT_CHECK(log_every_n_steps >= 0, ConfigError, "config key '", prefix, ".log_every_n_steps': must be >= 0");
  }
};

namespace detail {
/// Lightning's Throughput: totals appended once per step, rates over the window. Pure arithmetic
/// (the tests feed it times by hand).
class Throughput {
 public:
  Throughput(int64_t window_size, std::optional<double> available_flops, int64_t world_size, std::string separator);
  /// Totals since the start: `time` seconds, `batches`, `samples`, `lengths` (sample lengths; < 0: none);
  /// `flops` of this step's batch on one device (< 0: unknown).
  void update(double time, int64_t batches, int64_t samples, int64_t lengths, double flops);
  std::map<std::string, double> compute() const;

 private:
  size_t window_;
  std::optional<double> available_flops_;
  int64_t world_size_;
  std::string sep_;
  std::deque<double> time_, samples_, batches_, lengths_, flops_;
};
}  // namespace detail

class ThroughputMonitor : public Callback {
 public:
  using SizeFn = std::function<int64_t(const Batch&)>;
  /// `batch_size_fn` / `length_fn` (null: inferred as above): a batch's samples and sample length.
  explicit ThroughputMonitor(ThroughputMonitorOptions options = {}, SizeFn batch_size_fn = {}, SizeFn length_fn = {});
  std::string state_key() const override { return "ThroughputMonitor"; }

  void setup(Trainer&, LightningModule&, const std::string& stage) override;
  void on_train_start(Trainer&, LightningModule&) override;
  void on_train_batch_end(Trainer&, LightningModule&, const torch::Tensor&, const Batch&, int64_t) override;
  void on_validation_start(Trainer&, LightningModule&) override;
  void on_validation_end(Trainer&, LightningModule&) override;

  /// The metrics computed at the last optimizer step (logged or not).
  const std::map<std::string, double>& last_metrics() const { return last_; }

 private:
  double now() const;

  ThroughputMonitorOptions options_;
  SizeFn batch_size_fn_, length_fn_;
  std::optional<detail::Throughput> throughput_;
  double t0_ = 0, val_t0_ = 0;
  int64_t samples_ = 0, lengths_ = 0, batches_ = 0, last_step_ = -1;
  bool has_lengths_ = true, warned_flops_ = false;
  std::map<std::string, double> last_;
};

}  // namespace volt
