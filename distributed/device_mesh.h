#pragma once
/// DeviceMesh: the ranks of a job laid out as an N-dimensional array with named dimensions, as
/// PyTorch's DeviceMesh (FSDP2, torchtitan). Parallelisms take their process groups from it by
/// dimension name: DDP's "dp" (the whole world), FSDP's "replicate" x "shard" (HYBRID_SHARD: shard
/// inside a host, replicate across hosts), and any future one (tensor parallelism's "tp").
///
/// Global rank r sits at the row-major coordinate of r over `shape`; the group along a dimension
/// holds the ranks whose other coordinates equal this rank's. For a job over hosts the default
/// layout is (num_nodes, ranks per node), so the last dimension stays inside a host.
///
/// Ownership: owns the sub-groups it creates; the world group is borrowed and must outlive it.
/// Construction is collective (every rank builds the same mesh, dimensions in the same order).
/// Thread-safety: none (set up once on the training thread; the groups follow ProcessGroup's rules).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "volt/distributed/process_group.h"

namespace volt {

/// A mesh's shape and dimension names (validated by DeviceMesh).
struct MeshLayout {
  std::vector<int64_t> shape;
  std::vector<std::string> names;
};

class DeviceMesh {
 public:
  /// Lays out `world`'s ranks over `layout` and creates this rank's group along each dimension
  /// whose size is neither 1 nor the world's. Throws ConfigError when the shape's product is not
  /// the world size, a size is < 1, or names are missing or repeated.
  DeviceMesh(ProcessGroup& world, MeshLayout layout);
  DeviceMesh(const DeviceMesh&) = delete;
  DeviceMesh& operator=(const DeviceMesh&) = delete;

  const MeshLayout& layout() const { return layout_; }
  int64_t ndim() const { return static_cast<int64_t>(layout_.shape.size()); }
  /// The size of dimension `dim` (ConfigError for an unknown name).
  int64_t size(const std::string& dim) const;
  /// This rank's coordinate along `dim`.
  int64_t local_rank(const std::string& dim) const;
  /// The global ranks of this rank's group along `dim`, in order.
  std::vector<int64_t> group_ranks(const std::string& dim) const;
  /// This rank's group along `dim`: the world group when the dimension spans the world, null when
  /// its size is 1 in a larger world (nothing to exchange).
  ProcessGroup* group(const std::string& dim) const;
  ProcessGroup& world() const { return world_; }
  /// "(replicate=2, shard=2)".
  std::string describe() const;

  /// Checks `layout` for `world_size` ranks; `key` names the config key in the error.
  static void validate(const MeshLayout& layout, int64_t world_size, const std::string& key);

 private:
  int64_t index(const std::string& dim) const;
  ProcessGroup& world_;
  MeshLayout layout_;
  std::vector<std::unique_ptr<ProcessGroup>> groups_;  // per dimension; null: world or size 1
};

namespace detail {
/// The global ranks along dimension `dim` through `rank` (row-major over `shape`).
std::vector<int64_t> mesh_group_ranks(const std::vector<int64_t>& shape, int64_t dim, int64_t rank);
}  // namespace detail

}  // namespace volt
