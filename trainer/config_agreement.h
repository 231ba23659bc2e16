#pragma once
/// Every rank of a job runs one config, checked twice: the trainer options by the rendezvous, before
/// any backend or sub-group exists (ProcessGroupOptions::job_config: ranks whose strategies would
/// build other meshes or backends would wait in them), and the trainer options with the module's
/// hparams() once the process group is up, before any other collective. Nodes started with different
/// trainer options or models fail at once with the key that differs instead of waiting in different
/// collectives (one rank saving a checkpoint while another all-gathers) until the collective timeout.
///
/// What is compared: the Trainer's options as YAML, less the keys that only shape one node's output
/// (kNodeLocalKeys: its progress bar, summary, loggers and profiler), and the module's hparams(),
/// which every rank's module must give alike before configure_model(). default_root_dir is compared:
/// every rank reads its checkpoints there (ckpt_path: last, SLURM's requeue). The data module is
/// not: ranks that run out of batches at different points already agree (the data connector pads),
/// and data paths may differ between hosts.
///
/// Thread-safety: the training thread, at the same point on every rank (a collective).
#include <yaml-cpp/yaml.h>

#include <string>

#include "volt/core/config_diff.h"
#include "volt/trainer/trainer_options.h"

namespace volt {
class Strategy;

namespace detail {

/// Trainer keys that may differ between ranks.
inline constexpr const char* kNodeLocalKeys[] = {"enable_progress_bar", "enable_model_summary", "logger", "profiler"};

/// {trainer: options less kNodeLocalKeys, model: hparams}: what every rank must share.
YAML::Node shared_config(const TrainerOptions& options, const YAML::Node& hparams);
/// {trainer: options less kNodeLocalKeys}: compared by the rendezvous itself, before any backend
/// or sub-group is made (ProcessGroupOptions::job_config), so that ranks whose strategies would build
/// other meshes or backends fail there instead of waiting in them.
YAML::Node shared_trainer_config(const TrainerOptions& options);

/// Broadcasts rank 0's shared config; when any rank's differs, every rank throws ConfigError with the
/// lowest such rank's difference (exit code 2: restart agents stop, as a restart would meet it
/// again). Nothing at world size 1.
void check_ranks_share_config(Strategy& strategy, const YAML::Node& config);

}  // namespace detail
}  // namespace volt
