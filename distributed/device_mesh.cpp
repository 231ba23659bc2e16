#include "volt/distributed/device_mesh.h"

#include <algorithm>
#include <set>

#include "volt/core/errors.h"

namespace volt {

namespace detail {
std::vector<int64_t> mesh_group_ranks(const std::vector<int64_t>& shape, int64_t dim, int64_t rank) {
  int64_t stride = 1;
  for (size_t d = static_cast<size_t>(dim) + 1; d < shape.size(); ++d) stride *= shape[d];
  const int64_t n = shape[static_cast<size_t>(dim)];
  const int64_t coord = (rank / stride) % n;
  const int64_t base = rank - coord * stride;
  std::vector<int64_t> ranks;
  for (int64_t i = 0; i < n; ++i) ranks.push_back(base + i * stride);
  return ranks;
}
}  // namespace detail

namespace {
std::string describe_shape(const std::vector<int64_t>& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + ")";
}
}  // namespace

void DeviceMesh::validate(const MeshLayout& layout, int64_t world_size, const std::string& key) {
  VOLT_CHECK(!layout.shape.empty() && layout.shape.size() == layout.names.size(), ConfigError, "config key '", key,
             "': a device mesh needs one name per dimension (", layout.shape.size(), " sizes, ", layout.names.size(),
             " names)");
  int64_t product = 1;
  for (int64_t s : layout.shape) {
    VOLT_CHECK(s >= 1, ConfigError, "config key '", key, "': mesh sizes must be >= 1, got ", s);
    // A product that wraps (3 x 6148914691236517206 is 2 in int64) must not pass for the world.
    VOLT_CHECK(!__builtin_mul_overflow(product, s, &product), ConfigError, "config key '", key, "': the mesh ",
               describe_shape(layout.shape), " has more ranks than the world of ", world_size,
               " (devices x num_nodes); the sizes must multiply to it");
  }
  std::set<std::string> seen;
  for (const auto& n : layout.names)
    VOLT_CHECK(!n.empty() && seen.insert(n).second, ConfigError, "config key '", key, "': dimension name '", n,
               "' is empty or repeated");
  VOLT_CHECK(product == world_size, ConfigError, "config key '", key, "': the mesh has ", product,
             " ranks but the world has ", world_size, " (devices x num_nodes); the sizes must multiply to it");
}

DeviceMesh::DeviceMesh(ProcessGroup& world, MeshLayout layout) : world_(world), layout_(std::move(layout)) {
  validate(layout_, world.size(), "device_mesh");
  for (int64_t d = 0; d < ndim(); ++d) {
    const int64_t n = layout_.shape[static_cast<size_t>(d)];
    if (n == 1 || n == world.size()) {
      groups_.emplace_back();
      continue;
    }
    const auto ranks = detail::mesh_group_ranks(layout_.shape, d, world.rank());
    // The tag names the dimension and where the group sits along the others: unique in the job.
    std::string tag = "mesh/" + layout_.names[static_cast<size_t>(d)] + "@" + std::to_string(ranks.front());
    groups_.push_back(std::make_unique<ProcessGroup>(world, ranks, tag));
  }
}

int64_t DeviceMesh::index(const std::string& dim) const {
  auto it = std::find(layout_.names.begin(), layout_.names.end(), dim);
  VOLT_CHECK(it != layout_.names.end(), ConfigError, "device mesh ", describe(), " has no dimension '", dim, "'");
  return it - layout_.names.begin();
}

int64_t DeviceMesh::size(const std::string& dim) const { return layout_.shape[static_cast<size_t>(index(dim))]; }

int64_t DeviceMesh::local_rank(const std::string& dim) const {
  const auto ranks = group_ranks(dim);
  return std::find(ranks.begin(), ranks.end(), world_.rank()) - ranks.begin();
}

std::vector<int64_t> DeviceMesh::group_ranks(const std::string& dim) const {
  return detail::mesh_group_ranks(layout_.shape, index(dim), world_.rank());
}

ProcessGroup* DeviceMesh::group(const std::string& dim) const {
  const int64_t d = index(dim);
  const int64_t n = layout_.shape[static_cast<size_t>(d)];
  if (n == world_.size()) return &world_;
  if (n == 1) return nullptr;
  return groups_[static_cast<size_t>(d)].get();
}

std::string DeviceMesh::describe() const {
  std::string s = "(";
  for (size_t d = 0; d < layout_.shape.size(); ++d)
    s += (d ? ", " : "") + layout_.names[d] + "=" + std::to_string(layout_.shape[d]);
  return s + ")";
}

}  // namespace volt
