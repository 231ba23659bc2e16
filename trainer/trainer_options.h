#pragma once
/// Trainer arguments with Lightning's names and defaults; maps one-to-one onto the `trainer:`
/// section of a config. Validated once, when the Trainer is constructed.
#include <cstdint>
#include <optional>
#include <string>

#include "volt/core/options.h"
#include "volt/strategies/strategy_options.h"
#include "volt/trainer/slurm_requeue.h"

namespace volt {

struct TrainerOptions {
  std::string accelerator = "cpu";  // "cpu", "cuda", "auto"
  int64_t devices = 1;
  int64_t num_nodes = 1;
  StrategyOptions strategy;
  std::string precision = "32-true";
  int64_t max_epochs = -1;  // -1: 1000 when max_steps is -1 too (Lightning's rule), else unlimited
  int64_t max_steps = -1;
  BatchLimit limit_train_batches;
  BatchLimit limit_val_batches;
  BatchLimit limit_test_batches;
  BatchLimit limit_predict_batches;
  BatchLimit val_check_interval;
  int64_t check_val_every_n_epoch = 1;
  int64_t num_sanity_val_steps = 2;
  int64_t accumulate_grad_batches = 1;
  std::optional<double> gradient_clip_val;
  Choice<GradientClipAlgorithm> gradient_clip_algorithm = GradientClipAlgorithm::Norm;
  int64_t log_every_n_steps = 50;
  std::string default_root_dir = ".";
  bool enable_checkpointing = true;
  bool enable_progress_bar = true;
  bool enable_model_summary = true;
  bool logger = true;  // CSV logger under default_root_dir/lightning_logs/version_N
  std::optional<int64_t> seed;
  bool deterministic = false;
  /// LibTorch's anomaly detection during fit: backward names the forward operation whose gradient
  /// turned nan (slow; for debugging), as Lightning's detect_anomaly.
  bool detect_anomaly = false;
  /// SLURM auto-requeue (trainer/slurm_requeue.h), Lightning's SLURMEnvironment plugin.
  SLURMOptions slurm;

  template <class V>
  void visit(V& v) {
    v("accelerator", accelerator)("devices", devices)("num_nodes", num_nodes)("strategy", strategy)(
        "precision", precision)("max_epochs", max_epochs)("max_steps", max_steps)(
        "limit_train_batches", limit_train_batches)("limit_val_batches", limit_val_batches)(
        "limit_test_batches", limit_test_batches)("limit_predict_batches", limit_predict_batches)(
        "val_check_interval", val_check_interval)("check_val_every_n_epoch", check_val_every_n_epoch)(
        "num_sanity_val_steps", num_sanity_val_steps)("accumulate_grad_batches", accumulate_grad_batches)(
        "gradient_clip_val", gradient_clip_val)("gradient_clip_algorithm", gradient_clip_algorithm)(
        "log_every_n_steps", log_every_n_steps)("default_root_dir", default_root_dir)(
        "enable_checkpointing", enable_checkpointing)("enable_progress_bar", enable_progress_bar)(
        "enable_model_summary", enable_model_summary)("logger", logger)("seed", seed)("deterministic", deterministic)(
        "detect_anomaly", detect_anomaly)("slurm", slurm);
  }
  /// Checks every value and normalizes names; throws ConfigError naming the key.
  void validate();
  /// The epoch limit after Lightning's defaulting rule.
  int64_t effective_max_epochs() const;
};

}  // namespace volt
