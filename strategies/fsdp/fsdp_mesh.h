#pragma once
/// FSDPMesh: the (replicate x shard) layout of an FSDP job, read off the strategy's 2-D DeviceMesh
/// (distributed/device_mesh.h) as PyTorch's HSDP does. Global rank r sits in shard group
/// r / shard_size (ranks that split one copy of the parameters) and replicate group r % shard_size
/// (ranks holding the same shard). FULL_SHARD / SHARD_GRAD_OP: one shard group of the whole world;
/// NO_SHARD: shard size 1; HYBRID_SHARD: by default (num_nodes, devices), so a copy is sharded
/// inside each host and replicated across hosts.
///
/// Ownership: the groups belong to the DeviceMesh, which the strategy owns.
/// Thread-safety: none (set up once on the training thread).
#include <memory>
#include <vector>

#include "volt/distributed/device_mesh.h"
#include "volt/strategies/strategy_options.h"

namespace volt::detail {

class FSDPMesh {
 public:
  /// Validates the layout for `world` ranks (devices x num_nodes); throws ConfigError naming
  /// trainer.strategy.device_mesh when it does not fit.
  FSDPMesh(const FSDPOptions& options, int64_t devices, int64_t num_nodes);
  int64_t shard_size() const { return shard_size_; }
  int64_t replicate_size() const { return replicate_size_; }
  /// The DeviceMesh layout: (replicate, shard).
  MeshLayout layout() const { return {{replicate_size_, shard_size_}, {"replicate", "shard"}}; }
  /// Takes the groups from `mesh` (built from layout(); must outlive this).
  void connect(const DeviceMesh& mesh) { mesh_ = &mesh; }
  /// The group that shards parameters; null when the shard size is 1.
  ProcessGroup* shard_group() const;
  /// The group that averages gradients across replicas; null when there is one replica.
  ProcessGroup* replicate_group() const;
  /// This rank's index within its shard group.
  int64_t shard_rank() const;

 private:
  int64_t shard_size_ = 1, replicate_size_ = 1;
  const DeviceMesh* mesh_ = nullptr;
};

}  // namespace volt::detail
