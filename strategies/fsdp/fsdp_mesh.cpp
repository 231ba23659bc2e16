#include "volt/strategies/fsdp/fsdp_mesh.h"

#include <string>

#include "volt/core/errors.h"

namespace volt::detail {

FSDPMesh::FSDPMesh(const FSDPOptions& options, int64_t devices, int64_t num_nodes) {
  const int64_t world = devices * num_nodes;
  const ShardingStrategy s = options.sharding_strategy.value();
  if (s == ShardingStrategy::NoShard) {
    shard_size_ = 1;
    replicate_size_ = world;
  } else if (s == ShardingStrategy::HybridShard || s == ShardingStrategy::HybridShardZero2) {
    std::vector<int64_t> mesh = options.device_mesh;
    if (mesh.empty()) mesh = {num_nodes, devices};
    // A product that wraps (3 x 6148914691236517206 is 2 in int64) must not pass for the world.
    int64_t ranks = 0;
    const bool wraps = __builtin_mul_overflow(mesh[0], mesh[1], &ranks);
    VOLT_CHECK(!wraps && ranks == world, ConfigError, "config key 'trainer.strategy.device_mesh': (", mesh[0], ", ",
               mesh[1], ") has ", wraps ? std::string("at least 2^63") : std::to_string(ranks),
               " ranks but the world has ", world, " (devices x num_nodes); replicate_size x shard_size must equal it");
    VOLT_CHECK(options.auto_wrap_policy.empty() == false || !options.device_mesh.empty(), ConfigError,
               "config key 'trainer.strategy': ", options.sharding_strategy,
               " needs an auto_wrap_policy or a device_mesh");
    replicate_size_ = mesh[0];
    shard_size_ = mesh[1];
  } else {
    shard_size_ = world;
    replicate_size_ = 1;
  }
}

ProcessGroup* FSDPMesh::shard_group() const {
  if (shard_size_ == 1) return nullptr;
  VOLT_CHECK(mesh_ != nullptr, DistributedError, "FSDP's process groups used before setup_environment()");
  return mesh_->group("shard");
}

ProcessGroup* FSDPMesh::replicate_group() const {
  if (replicate_size_ == 1) return nullptr;
  VOLT_CHECK(mesh_ != nullptr, DistributedError, "FSDP's process groups used before setup_environment()");
  return mesh_->group("replicate");
}

int64_t FSDPMesh::shard_rank() const { return shard_group() ? shard_group()->rank() : 0; }

}  // namespace volt::detail
