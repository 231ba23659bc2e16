#include "volt/trainer/trainer_options.h"

#include <torch/cuda.h>

#include <algorithm>
#include <thread>

namespace volt {

void TrainerOptions::validate() {
  // Python's timedelta.max, as the Timer it becomes (checked here to name this key).
  VOLT_CHECK(!max_time || (max_time->seconds >= 0 && max_time->seconds <= 999999999.0 * 86400), ConfigError,
             "config key 'trainer.max_time': ", max_time ? max_time->seconds : 0.0,
             " seconds is not a duration from 00:00:00:00 to 999999999:00:00:00 (DD:HH:MM:SS)");
  // "auto" falls back to the CPU; "gpu" is a request for one, as in Lightning.
  if (accelerator == "auto") accelerator = torch::cuda::is_available() ? "cuda" : "cpu";
  if (accelerator == "gpu") accelerator = "cuda";
  VOLT_CHECK(accelerator == "cpu" || accelerator == "cuda", ConfigError,
             "config key 'trainer.accelerator': unknown value '", accelerator, "'; valid: cpu, cuda, gpu, auto");
  VOLT_CHECK(accelerator != "cuda" || torch::cuda::is_available(), ConfigError,
             "config key 'trainer.accelerator': 'cuda' requested but this LibTorch has no CUDA or no GPU is visible;"
             " use accelerator: cpu");
  if (devices.is_auto())
    devices = accelerator == "cuda" ? std::max<int64_t>(1, static_cast<int64_t>(torch::cuda::device_count())) : 1;
  VOLT_CHECK(devices >= 1, ConfigError, "config key 'trainer.devices': must be >= 1 or 'auto', got ", devices.count);
  if (accelerator == "cpu") {
    // Each device is a process with its share of the cores; far more processes than cores only
    // thrash (and a typo like 1000 would fork until memory runs out).
    const int64_t cores = std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()));
    VOLT_CHECK(devices <= 8 * cores, ConfigError, "config key 'trainer.devices': ", devices,
               " CPU processes on a machine with ", cores, " cores; at most ", 8 * cores, " (8 per core)");
  } else {
    const int64_t gpus = static_cast<int64_t>(torch::cuda::device_count());
    VOLT_CHECK(devices <= std::max<int64_t>(gpus, 1) * 8, ConfigError, "config key 'trainer.devices': ", devices,
               " processes for ", gpus, " visible GPU(s)");
  }
  VOLT_CHECK(!cuda_graph || !detect_anomaly, ConfigError,
             "config key 'trainer.cuda_graph': detect_anomaly checks each operation's output on the host, which a "
             "captured graph cannot do; turn one of them off");
  VOLT_CHECK(num_nodes >= 1, ConfigError, "config key 'trainer.num_nodes': must be >= 1, got ", num_nodes);
  VOLT_CHECK(max_restarts >= 0 && max_restarts <= 1000, ConfigError,
             "config key 'trainer.max_restarts': must be from 0 to 1000, got ", max_restarts);
  VOLT_CHECK(!max_epochs || *max_epochs >= -1, ConfigError,
             "config key 'trainer.max_epochs': must be >= -1 (-1: no limit) or null, got ", max_epochs.value_or(0));
  VOLT_CHECK(max_steps >= -1, ConfigError, "config key 'trainer.max_steps': must be >= -1, got ", max_steps);
  VOLT_CHECK(!min_epochs || *min_epochs >= 0, ConfigError, "config key 'trainer.min_epochs': must be >= 0, got ",
             min_epochs.value_or(0));
  VOLT_CHECK(!min_steps || *min_steps >= 0, ConfigError, "config key 'trainer.min_steps': must be >= 0, got ",
             min_steps.value_or(0));
  VOLT_CHECK(!min_epochs || !max_epochs || *max_epochs < 0 || *min_epochs <= *max_epochs, ConfigError,
             "config key 'trainer.min_epochs': ", min_epochs.value_or(0), " is more than trainer.max_epochs (",
             max_epochs.value_or(0), ")");
  VOLT_CHECK(!min_steps || max_steps < 0 || *min_steps <= max_steps, ConfigError,
             "config key 'trainer.min_steps': ", *min_steps, " is more than trainer.max_steps (", max_steps, ")");
  VOLT_CHECK(reload_dataloaders_every_n_epochs >= 0, ConfigError,
             "config key 'trainer.reload_dataloaders_every_n_epochs': must be >= 0, got ",
             reload_dataloaders_every_n_epochs);
  for (size_t i = 0; i < plugins.size(); ++i) {
    VOLT_CHECK(plugins[i] == "AsyncCheckpointIO", ConfigError, "config key 'trainer.plugins[", i,
               "]': unknown plugin '", plugins[i], "'; valid: AsyncCheckpointIO");
    for (size_t j = 0; j < i; ++j)
      VOLT_CHECK(plugins[j] != plugins[i], ConfigError, "config key 'trainer.plugins[", i, "]': ", plugins[i],
                 " is given twice (as plugins[", j, "]); a Trainer has one checkpoint IO");
  }
  VOLT_CHECK(check_val_every_n_epoch >= 1, ConfigError,
             "config key 'trainer.check_val_every_n_epoch': must be >= 1, got ", check_val_every_n_epoch);
  VOLT_CHECK(num_sanity_val_steps >= -1, ConfigError, "config key 'trainer.num_sanity_val_steps': must be >= -1, got ",
             num_sanity_val_steps);
  VOLT_CHECK(accumulate_grad_batches >= 1, ConfigError,
             "config key 'trainer.accumulate_grad_batches': must be >= 1, got ", accumulate_grad_batches);
  VOLT_CHECK(!gradient_clip_val || *gradient_clip_val >= 0, ConfigError,
             "config key 'trainer.gradient_clip_val': must be >= 0, got ", gradient_clip_val.value_or(0));
  VOLT_CHECK(gradient_clip_algorithm.is_valid(), ConfigError,
             "config key 'trainer.gradient_clip_algorithm': unknown value '", gradient_clip_algorithm,
             "'; valid: norm, value");
  VOLT_CHECK(log_every_n_steps >= 1, ConfigError, "config key 'trainer.log_every_n_steps': must be >= 1, got ",
             log_every_n_steps);
  VOLT_CHECK(val_check_interval.is_fraction ? val_check_interval.value > 0 : val_check_interval.value >= 1, ConfigError,
             "config key 'trainer.val_check_interval': must be a fraction in (0, 1] or a batch count >= 1");
  VOLT_CHECK(!default_root_dir.empty(), ConfigError, "config key 'trainer.default_root_dir': must not be empty");
  // As Lightning's seed_everything: seeds are numpy's range, 0 to 2^32 - 1.
  VOLT_CHECK(!seed || (*seed >= 0 && *seed <= kMaxSeed), ConfigError,
             "config key 'trainer.seed' (or seed_everything): ", seed.value_or(0), " is out of range; a seed is ",
             "from 0 to ", kMaxSeed, " (as Lightning's seed_everything), or null for none");
  slurm.requeue_signal.validate("trainer.slurm.requeue_signal");
  logger.validate();
  strategy.validate();
  profiler.validate();
  VOLT_CHECK(fast_dev_run.batches >= 0, ConfigError, "config key 'trainer.fast_dev_run': must be >= 0 or a bool, got ",
             fast_dev_run.batches);
}

void TrainerOptions::apply_debugging_flags() {
  // Lightning's _init_debugging_flags; applying them twice gives the same options.
  if (fast_dev_run) {
    const BatchLimit n = BatchLimit::count(fast_dev_run.batches);
    if (!overfitting()) limit_train_batches = limit_val_batches = n;
    limit_test_batches = limit_predict_batches = n;
    max_steps = fast_dev_run.batches;
    max_epochs = 1;
    num_sanity_val_steps = 0;
    val_check_interval = BatchLimit::fraction(1.0);
    check_val_every_n_epoch = 1;
    enable_checkpointing = false;
    logger = false;
  }
  if (overfitting()) limit_train_batches = limit_val_batches = overfit_batches;
}

namespace detail {
Devices YamlCodec<Devices>::decode(const YAML::Node& n, const std::string& key) {
  if (n.IsScalar() && n.Scalar() == "auto") return Devices();
  int64_t v = 0;
  if (!n.IsScalar() || !YAML::convert<int64_t>::decode(n, v)) type_error(key, "a number of devices or 'auto'", n);
  return Devices(v);  // -1 is Lightning's "every device": the same as auto
}
YAML::Node YamlCodec<Devices>::encode(const Devices& v) {
  return v.is_auto() ? YAML::Node("auto") : YAML::Node(v.count);
}

FastDevRun YamlCodec<FastDevRun>::decode(const YAML::Node& n, const std::string& key) {
  bool on = false;
  if (n.IsScalar() && YAML::convert<bool>::decode(n, on)) return FastDevRun(on);
  if (!n.IsScalar()) type_error(key, "true, false or a number of batches", n);
  return FastDevRun(YamlCodec<int64_t>::decode(n, key));
}
YAML::Node YamlCodec<FastDevRun>::encode(const FastDevRun& v) {
  if (v.batches <= 1) return YAML::Node(v.batches == 1);
  return YAML::Node(v.batches);
}
}  // namespace detail

int64_t TrainerOptions::effective_max_epochs() const {
  if (max_epochs) return *max_epochs >= 0 ? *max_epochs : std::numeric_limits<int64_t>::max();
  return max_steps == -1 && !max_time ? 1000 : std::numeric_limits<int64_t>::max();
}

}  // namespace volt
