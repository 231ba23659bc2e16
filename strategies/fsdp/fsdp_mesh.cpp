#include "volt/strategies/fsdp/fsdp_mesh.h"

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
    VOLT_CHECK(mesh[0] * mesh[1] == world, ConfigError, "config key 'trainer.strategy.device_mesh': (", mesh[0], ", ",
               mesh[1], ") has ", mesh[0] * mesh[1], " ranks but the world has ", world,
               " (devices x num_nodes); replicate_size x shard_size must equal it");
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

void FSDPMesh::connect(ProcessGroup& world) {
  // Once per world: setup_environment runs again for each fit / validate / predict (and early for
  // Trainer::prepare_data), and a sub-group's rendezvous keys in the store are used only once.
  if (world_ == &world) return;
  world_ = &world;
  const int64_t r = world.rank(), n = world.size();
  if (shard_size_ > 1 && shard_size_ < n) {
    const int64_t g = r / shard_size_;
    std::vector<int64_t> ranks;
    for (int64_t i = 0; i < shard_size_; ++i) ranks.push_back(g * shard_size_ + i);
    shard_ = std::make_unique<ProcessGroup>(world, ranks, "shard" + std::to_string(g));
  }
  if (replicate_size_ > 1 && replicate_size_ < n) {
    const int64_t j = r % shard_size_;
    std::vector<int64_t> ranks;
    for (int64_t k = 0; k < replicate_size_; ++k) ranks.push_back(j + k * shard_size_);
    replicate_ = std::make_unique<ProcessGroup>(world, ranks, "replicate" + std::to_string(j));
  }
}

ProcessGroup* FSDPMesh::shard_group() const {
  if (shard_size_ == 1) return nullptr;
  return shard_ ? shard_.get() : world_;
}

ProcessGroup* FSDPMesh::replicate_group() const {
  if (replicate_size_ == 1) return nullptr;
  return replicate_ ? replicate_.get() : world_;
}

int64_t FSDPMesh::shard_rank() const { return shard_group() ? shard_group()->rank() : 0; }

}  // namespace volt::detail
