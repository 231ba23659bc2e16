#include "volt/trainer/config_agreement.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstring>

#include "volt/core/config_diff.h"
#include "volt/core/errors.h"
#include "volt/core/options.h"
#include "volt/strategies/strategy.h"

namespace volt::detail {

namespace {

double broadcast_number(Strategy& s, double x, int64_t src) {
  return s.broadcast(torch::tensor({x}, torch::kDouble), src).item<double>();
}

/// Rank `src`'s `text` on every rank (its length, then its bytes).
std::string broadcast_string(Strategy& s, const std::string& text, int64_t src) {
  const auto n = static_cast<int64_t>(broadcast_number(s, static_cast<double>(text.size()), src));
  torch::Tensor bytes = torch::zeros({std::max<int64_t>(n, 1)}, torch::kUInt8);
  if (s.global_rank() == src) std::memcpy(bytes.data_ptr<uint8_t>(), text.data(), static_cast<size_t>(n));
  bytes = s.broadcast(bytes, src);
  return std::string(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()), static_cast<size_t>(n));
}

}  // namespace

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
  const int64_t rank = strategy.global_rank(), world = strategy.world_size();
  const std::string mine = YAML::Dump(config);
  const std::string rank0 = broadcast_string(strategy, rank == 0 ? mine : std::string(), 0);
  // Compared key by key: two dumps may differ in the order of a map's keys alone.
  const std::string local = mine == rank0 ? std::string() : first_difference(config, YAML::Load(rank0), rank);
  // The lowest differing rank's message on every rank, so that all fail together.
  const auto failing = static_cast<int64_t>(
      strategy
          .all_reduce(torch::tensor({static_cast<double>(local.empty() ? world : rank)}, torch::kDouble), ReduceOp::Min)
          .item<double>());
  if (failing >= world) return;
  const std::string message = broadcast_string(strategy, local, failing);
  throw ConfigError(str_cat(message, ": every rank of a job must run the same trainer options and model (only ",
                            "enable_progress_bar, enable_model_summary, logger and profiler may differ); ",
                            "start every node with the same config"));
}

}  // namespace volt::detail
