#include "volt/trainer/config_agreement.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "volt/core/errors.h"
#include "volt/core/options.h"
#include "volt/strategies/strategy.h"

namespace volt::detail {

namespace {

std::string shown(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "null";
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  YAML::Emitter out;
  out << YAML::Flow << n;
  return out.c_str();
}

std::string key_at(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

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

YAML::Node shared_config(const TrainerOptions& options, const YAML::Node& hparams) {
  YAML::Node trainer = options_to_yaml(options);
  for (const char* key : kNodeLocalKeys) trainer.remove(key);
  YAML::Node out(YAML::NodeType::Map);
  out["trainer"] = trainer;
  out["model"] = hparams && !hparams.IsNull() ? YAML::Clone(hparams) : YAML::Node(YAML::NodeType::Map);
  return out;
}

std::string first_difference(const YAML::Node& mine, const YAML::Node& theirs, int64_t rank,
                             const std::string& prefix) {
  auto differ = [&](const std::string& key, const YAML::Node& a, const YAML::Node& b) {
    return str_cat("config key '", key, "' is ", shown(a), " on rank ", rank, " but ", shown(b), " on rank 0");
  };
  if (mine.Type() != theirs.Type()) return differ(prefix, mine, theirs);
  if (mine.IsMap()) {
    std::set<std::string> seen;
    for (const auto& kv : theirs) {
      const std::string k = kv.first.Scalar();
      seen.insert(k);
      const YAML::Node m = mine[k];
      if (!m.IsDefined()) return differ(key_at(prefix, k), YAML::Node(), kv.second);
      std::string d = first_difference(m, kv.second, rank, key_at(prefix, k));
      if (!d.empty()) return d;
    }
    for (const auto& kv : mine)
      if (!seen.count(kv.first.Scalar())) return differ(key_at(prefix, kv.first.Scalar()), kv.second, YAML::Node());
    return "";
  }
  if (mine.IsSequence()) {
    if (mine.size() != theirs.size()) return differ(prefix, mine, theirs);
    for (size_t i = 0; i < mine.size(); ++i) {
      std::string d = first_difference(mine[i], theirs[i], rank, str_cat(prefix, "[", i, "]"));
      if (!d.empty()) return d;
    }
    return "";
  }
  if (mine.IsScalar() && mine.Scalar() != theirs.Scalar()) return differ(prefix, mine, theirs);
  return "";
}

void check_ranks_share_config(Strategy& strategy, const YAML::Node& config) {
  if (strategy.world_size() <= 1) return;
  const int64_t rank = strategy.global_rank(), world = strategy.world_size();
  const std::string mine = YAML::Dump(config);
  const std::string rank0 = broadcast_string(strategy, rank == 0 ? mine : std::string(), 0);
  std::string local;
  if (mine != rank0) {
    local = first_difference(config, YAML::Load(rank0), rank);
    if (local.empty()) local = str_cat("the config of rank ", rank, " differs from rank 0's");
  }
  // The lowest differing rank's message on every rank, so that all fail together.
  const auto failing = static_cast<int64_t>(
      strategy
          .all_reduce(torch::tensor({static_cast<double>(local.empty() ? world : rank)}, torch::kDouble), ReduceOp::Min)
          .item<double>());
  if (failing >= world) return;
  const std::string message = broadcast_string(strategy, local, failing);
  throw ConfigError(
      str_cat(message, ": every rank of a job must run the same trainer options and model (only ",
              "default_root_dir, enable_progress_bar, enable_model_summary, logger and profiler may differ); ",
              "start every node with the same config"));
}

}  // namespace volt::detail
