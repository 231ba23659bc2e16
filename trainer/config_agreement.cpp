#include "volt/trainer/config_agreement.h"

#include "volt/checkpoint/comm_text.h"
#include "volt/core/config_diff.h"
#include "volt/core/errors.h"
#include "volt/core/options.h"
#include "volt/strategies/strategy.h"

namespace volt::detail {

YAML::Node shared_trainer_config(const TrainerOptions& options) {
  YAML::Node trainer = options_to_yaml(options);
  for (const char* key : kNodeLocalKeys) trainer.remove(key);
  YAML::Node out(YAML::NodeType::Map);
  out["trainer"] = trainer;
  return out;
}

YAML::Node shared_config(const TrainerOptions& options, const YAML::Node& hparams) {
  YAML::Node out = shared_trainer_config(options);
  out["model"] = hparams && !hparams.IsNull() ? YAML::Clone(hparams) : YAML::Node(YAML::NodeType::Map);
  return out;
}

void check_ranks_share_config(Strategy& strategy, const YAML::Node& config) {
  if (strategy.world_size() <= 1) return;
  const int64_t rank = strategy.global_rank();
  const std::string mine = YAML::Dump(config);
  const std::string rank0 = broadcast_text(strategy.state_comm(), mine, 0);
  // Compared key by key: two dumps may differ in the order of a map's keys alone.
  const std::string local = mine == rank0 ? std::string() : first_difference(config, YAML::Load(rank0), rank);
  // The lowest differing rank's message on every rank, so that all fail together.
  const FirstFailure failed = first_failure(strategy.state_comm(), local);
  if (failed.rank >= strategy.world_size()) return;
  throw ConfigError(str_cat(failed.message, ": every rank of a job must run the same trainer options and model (only ",
                            "enable_progress_bar, enable_model_summary, logger and profiler may differ); ",
                            "start every node with the same config"));
}

}  // namespace volt::detail
