#pragma once
/// Reads a checkpoint of either format, tensor by tensor or flat range by flat range, verifying
/// every byte it reads. `path` is a file (full format) or a folder (sharded format); the format is
/// recognised from it. A sharded checkpoint is read through its manifest, so any rank layout can
/// load it: that is how FSDP reshards to another world size, wrap policy or sharding strategy.
///
/// Ownership: holds one open file per shard. Thread-safety: const methods may run concurrently.
#include <torch/types.h>
#include <yaml-cpp/yaml.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "volt/checkpoint/sharded_checkpoint.h"
#include "volt/checkpoint/tensor_archive.h"

namespace volt {

class CheckpointReader {
 public:
  /// Opens and verifies the structure (files present, marker, manifest checksum, every listed
  /// piece in its file). Throws CheckpointError naming the file and the problem.
  explicit CheckpointReader(std::string path);

  const std::string& path() const { return path_; }
  /// "full" or "sharded".
  const std::string& format() const { return format_; }
  int64_t epoch() const { return epoch_; }
  int64_t global_step() const { return global_step_; }
  /// The checkpoint's metadata (see Checkpoint::meta).
  const YAML::Node& meta() const { return meta_; }
  /// The world size it was saved with (1 for a full checkpoint without that record).
  int64_t world_size() const { return world_size_; }

  /// Names in `section`, sorted.
  std::vector<std::string> names(const std::string& section) const;
  bool has(const std::string& section, const std::string& name) const;
  /// Global dtype and shape; throws CheckpointError if absent.
  const ShardedTensor& tensor(const std::string& section, const std::string& name) const;
  /// The whole tensor in its global shape.
  torch::Tensor read(const std::string& section, const std::string& name) const;
  /// Elements [start, start + length) of the flattened tensor, assembled from the pieces that
  /// hold them; reads only those.
  torch::Tensor read_flat(const std::string& section, const std::string& name, int64_t start, int64_t length) const;

 private:
  void open();
  std::string path_, format_;
  int64_t epoch_ = 0, global_step_ = 0, world_size_ = 1;
  YAML::Node meta_;
  ShardedManifest manifest_;
  std::vector<std::unique_ptr<ArchiveReader>> files_;  // by rank (one for a full checkpoint)
};

}  // namespace volt
