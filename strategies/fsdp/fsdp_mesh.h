#pragma once
/// FSDPMesh: the (replicate x shard) layout of an FSDP job and its process groups, as PyTorch's
/// 2-D DeviceMesh for HYBRID_SHARD. Global rank r sits in shard group r / shard_size (ranks that
/// split one copy of the parameters) and replicate group r % shard_size (ranks holding the same
/// shard). FULL_SHARD / SHARD_GRAD_OP: one shard group of the whole world; NO_SHARD: shard size 1.
///
/// Ownership: owns the subgroups it creates; the world group is borrowed from the strategy.
/// Thread-safety: none (set up once on the training thread).
#include <memory>
#include <vector>

#include "volt/distributed/process_group.h"
#include "volt/strategies/strategy_options.h"

namespace volt::detail {

class FSDPMesh {
 public:
  /// Validates the layout for `world` ranks (devices x num_nodes); throws ConfigError naming
  /// trainer.strategy.device_mesh when it does not fit.
  FSDPMesh(const FSDPOptions& options, int64_t devices, int64_t num_nodes);
  int64_t shard_size() const { return shard_size_; }
  int64_t replicate_size() const { return replicate_size_; }
  /// Creates the subgroups this rank belongs to (collective over `world`, which must outlive this);
  /// later calls with the same world do nothing.
  void connect(ProcessGroup& world);
  /// The group that shards parameters; null when the shard size is 1.
  ProcessGroup* shard_group() const;
  /// The group that averages gradients across replicas; null when there is one replica.
  ProcessGroup* replicate_group() const;
  /// This rank's index within its shard group.
  int64_t shard_rank() const;

 private:
  int64_t shard_size_ = 1, replicate_size_ = 1;
  ProcessGroup* world_ = nullptr;
  std::unique_ptr<ProcessGroup> shard_, replicate_;
};

}  // namespace volt::detail
