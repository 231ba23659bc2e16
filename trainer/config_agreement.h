#pragma once
/// Every rank of a job runs one config: checked once the process group is up, before any other
/// collective, so that nodes started with different trainer options or model hyper-parameters fail
/// at once with the key that differs instead of waiting in different collectives (one rank saving a
/// checkpoint while another all-gathers) until the collective timeout.
///
/// What is compared: the Trainer's options as YAML, less the keys that only shape one node's output
/// (kNodeLocalKeys: its folder, progress bar, summary, loggers and profiler), and the module's hparams(). The
/// data module is not: ranks that run out of batches at different points already agree (the data
/// connector pads), and data paths may differ between hosts.
///
/// Thread-safety: the training thread, at the same point on every rank (a collective).
#include <yaml-cpp/yaml.h>

#include <string>

#include "volt/trainer/trainer_options.h"

namespace volt {
class Strategy;

namespace detail {

/// Trainer keys that may differ between ranks.
inline constexpr const char* kNodeLocalKeys[] = {"default_root_dir", "enable_progress_bar", "enable_model_summary",
                                                 "logger", "profiler"};

/// {trainer: options less kNodeLocalKeys, model: hparams}: what every rank must share.
YAML::Node shared_config(const TrainerOptions& options, const YAML::Node& hparams);

/// The first key at which `mine` and `theirs` differ, as "config key 'trainer.max_steps' is 40 on
/// rank R but 60 on rank 0", or "" when they are equal. Keys are compared in `theirs`' order, then
/// the keys only `mine` has.
std::string first_difference(const YAML::Node& mine, const YAML::Node& theirs, int64_t rank,
                             const std::string& prefix = "");

/// Broadcasts rank 0's shared config; when any rank's differs, every rank throws ConfigError with the
/// lowest such rank's difference (exit code 2: restart agents stop, as a restart would meet it
/// again). Nothing at world size 1.
void check_ranks_share_config(Strategy& strategy, const YAML::Node& config);

}  // namespace detail
}  // namespace volt
