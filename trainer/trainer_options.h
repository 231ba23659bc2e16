#pragma once
/// Trainer arguments with Lightning's names and defaults; maps one-to-one onto the `trainer:`
/// section of a config. Validated once, when the Trainer is constructed.
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "volt/callbacks/timer.h"
#include "volt/core/options.h"
#include "volt/core/options_help.h"
#include "volt/loggers/logger_options.h"
#include "volt/profiler/profiler_options.h"
#include "volt/strategies/strategy_options.h"
#include "volt/trainer/slurm_requeue.h"

namespace volt {

/// Lightning's fast_dev_run: false (0), true (1 batch) or a number of batches. YAML: bool or int.
struct FastDevRun {
  int64_t batches = 0;
  FastDevRun() = default;
  FastDevRun(bool on) : batches(on ? 1 : 0) {}  // NOLINT: implicit, `fast_dev_run = true`
  FastDevRun(int n) : batches(n) {}             // NOLINT
  FastDevRun(int64_t n) : batches(n) {}         // NOLINT
  explicit operator bool() const { return batches > 0; }
};

namespace detail {
template <>
struct YamlCodec<FastDevRun> {
  static FastDevRun decode(const YAML::Node& n, const std::string& key);
  static YAML::Node encode(const FastDevRun& v);
};
template <>
struct HelpType<FastDevRun> {
  static std::string name() { return "bool|int"; }
};
}  // namespace detail

/// Lightning's devices: a number of processes on this node, or "auto" (YAML: an int, "auto" or -1):
/// every visible GPU when the accelerator is cuda, else 1. TrainerOptions::validate() resolves
/// "auto" to a count; it reads as that count (an int64_t) everywhere after.
struct Devices {
  static constexpr int64_t kAuto = -1;
  int64_t count = kAuto;
  Devices() = default;
  template <class I, class = std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>>>
  Devices(I n) : count(static_cast<int64_t>(n)) {}  // NOLINT: implicit, `devices = 2`
  operator int64_t() const { return count; }        // NOLINT: reads as the count
  bool is_auto() const { return count == kAuto; }
};

namespace detail {
template <>
struct YamlCodec<Devices> {
  static Devices decode(const YAML::Node& n, const std::string& key);
  static YAML::Node encode(const Devices& v);
};
template <>
struct HelpType<Devices> {
  static std::string name() { return "int|auto"; }
};
}  // namespace detail

struct TrainerOptions {
  /// "auto" (Lightning's default: cuda when a GPU is visible, else cpu), "cpu", "cuda" or "gpu".
  /// validate() resolves "auto" and "gpu".
  std::string accelerator = "auto";
  /// Processes on this node: a count or "auto" (Lightning's default; see Devices).
  Devices devices;
  int64_t num_nodes = 1;
  /// Restarts of the whole job when a rank or a host dies (distributed/elastic_agent.h): `volt`
  /// then supervises the ranks from a process of its own and resumes each attempt from the last
  /// checkpoint (ckpt_path: last). 0: a failure ends the job. Not under torchrun or SLURM (use
  /// torchrun's --max-restarts).
  int64_t max_restarts = 0;
  StrategyOptions strategy;
  std::string precision = "32-true";
  /// Lightning's: unset, 1000 when max_steps is -1 and no max_time or Timer callback bounds the fit,
  /// else unlimited; -1: unlimited (train until max_steps, max_time or a stop).
  std::optional<int64_t> max_epochs;
  int64_t max_steps = -1;
  /// Training runs at least this many epochs / optimizer steps even when a callback (EarlyStopping)
  /// sets should_stop earlier; null: no minimum (Lightning's min_epochs / min_steps).
  std::optional<int64_t> min_epochs;
  std::optional<int64_t> min_steps;
  BatchLimit limit_train_batches;
  BatchLimit limit_val_batches;
  BatchLimit limit_test_batches;
  BatchLimit limit_predict_batches;
  BatchLimit val_check_interval;
  int64_t check_val_every_n_epoch = 1;
  int64_t num_sanity_val_steps = 2;
  int64_t accumulate_grad_batches = 1;
  /// Validation, test and predict run under LibTorch's InferenceMode (true, Lightning's default) or
  /// under NoGradGuard (false). Runs of several processes on Gloo, and FSDP, use NoGradGuard
  /// whatever this says, as Lightning does for Gloo: see [Note: inference mode] in evaluation_loop.cpp.
  bool inference_mode = true;
  /// With a LightningDataModule: its train_dataloader() and val_dataloader() are called again every
  /// n epochs (0: never), as Lightning's reload_dataloaders_every_n_epochs.
  int64_t reload_dataloaders_every_n_epochs = 0;
  /// Lightning's plugins, by name: "AsyncCheckpointIO" (checkpoints written on a background thread).
  std::vector<std::string> plugins;
  std::optional<double> gradient_clip_val;
  Choice<GradientClipAlgorithm> gradient_clip_algorithm = GradientClipAlgorithm::Norm;
  int64_t log_every_n_steps = 50;
  std::string default_root_dir = ".";
  bool enable_checkpointing = true;
  bool enable_progress_bar = true;
  bool enable_model_summary = true;
  /// The loggers (loggers/logger_options.h): true = a CSV logger under
  /// default_root_dir/lightning_logs/version_N; false = none; "tensorboard"; {"csv", "tensorboard"}.
  LoggerOptions logger;
  /// The random seed (seed_everything in the CLI): 0 to kMaxSeed, or none.
  std::optional<int64_t> seed;
  static constexpr int64_t kMaxSeed = 4294967295;  ///< 2^32 - 1, numpy's (and Lightning's) largest seed
  bool deterministic = false;
  /// LibTorch's anomaly detection during fit: backward names the forward operation whose gradient
  /// turned nan (slow; for debugging), as Lightning's detect_anomaly.
  bool detect_anomaly = false;
  /// Each training step's forward and backward of the model's outermost HookedModules run as CUDA
  /// graphs, captured at the first step and replayed after (strategies/cuda_graphs/cuda_graphs.h):
  /// fewer kernel launches for small steps. Needs accelerator cuda and static shapes (drop_last);
  /// refused with FSDP, activation checkpointing and detect_anomaly.
  bool cuda_graph = false;
  /// SLURM auto-requeue (trainer/slurm_requeue.h), Lightning's SLURMEnvironment plugin.
  SLURMOptions slurm;
  /// Stops fit once this much time is spent training ("DD:HH:MM:SS" or {days, hours, minutes,
  /// seconds}): the Trainer adds a Timer callback (callbacks/timer.h) unless one is given.
  std::optional<Duration> max_time;
  /// Runs n (true: 1) batches of train / val / test / predict, one epoch, no sanity check, no
  /// checkpoints, no loggers (Lightning's fast_dev_run). validate() applies it to the limits.
  FastDevRun fast_dev_run;
  /// Overfits a fraction or a count of the training batches: limit_train_batches and
  /// limit_val_batches become this, and every epoch trains on the same batches in the same order.
  BatchLimit overfit_batches = BatchLimit::fraction(0.0);
  /// null (none), simple or pytorch (profiler/profiler_options.h).
  ProfilerOptions profiler;

  template <class V>
  void visit(V& v) {
    v("accelerator", accelerator)("devices", devices)("num_nodes", num_nodes)("max_restarts", max_restarts)(
        "strategy", strategy)("precision", precision)("max_epochs", max_epochs)("max_steps", max_steps)(
        "min_epochs", min_epochs)("min_steps", min_steps)("limit_train_batches", limit_train_batches)(
        "limit_val_batches", limit_val_batches)("limit_test_batches", limit_test_batches)(
        "limit_predict_batches", limit_predict_batches)("val_check_interval", val_check_interval)(
        "check_val_every_n_epoch", check_val_every_n_epoch)("num_sanity_val_steps", num_sanity_val_steps)(
        "accumulate_grad_batches", accumulate_grad_batches)("inference_mode", inference_mode)(
        "reload_dataloaders_every_n_epochs", reload_dataloaders_every_n_epochs)("plugins", plugins)(
        "gradient_clip_val", gradient_clip_val)("gradient_clip_algorithm", gradient_clip_algorithm)(
        "log_every_n_steps", log_every_n_steps)("default_root_dir", default_root_dir)(
        "enable_checkpointing", enable_checkpointing)("enable_progress_bar", enable_progress_bar)(
        "enable_model_summary", enable_model_summary)("logger", logger)("seed", seed)("deterministic", deterministic)(
        "detect_anomaly", detect_anomaly)("cuda_graph", cuda_graph)("slurm", slurm)("max_time", max_time)(
        "fast_dev_run", fast_dev_run)("overfit_batches", overfit_batches)("profiler", profiler);
  }
  /// Checks every value and normalizes names; throws ConfigError naming the key.
  void validate();
  /// fast_dev_run and overfit_batches rewrite the limits, max_steps / max_epochs, the sanity check,
  /// checkpointing and the loggers, as Lightning's Trainer does (the Trainer calls it after validate()).
  void apply_debugging_flags();
  /// Whether overfit_batches is on (> 0).
  bool overfitting() const { return overfit_batches.value > 0; }
  /// The epoch limit after Lightning's defaulting rule.
  int64_t effective_max_epochs() const;
};

}  // namespace volt
