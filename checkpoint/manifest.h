#pragma once
/// The sharded format's `manifest.yaml` and `COMPLETE` marker (see sharded_checkpoint.h): the one
/// place they are encoded and decoded, so the writer and the reader cannot drift apart.
#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "volt/checkpoint/checkpoint.h"
#include "volt/checkpoint/sharded_checkpoint.h"

namespace volt::detail {

/// A decoded manifest.
struct Manifest {
  int64_t world_size = 1;
  std::string save_id;             // every rank file of this save records the same
  std::vector<std::string> files;  // by rank
  int64_t epoch = 0, global_step = 0;
  YAML::Node meta;          // the checkpoint's metadata (Checkpoint::meta)
  ShardedManifest tensors;  // section -> name -> dtype, shape, pieces
};

/// manifest.yaml's text for a save of `world_size` ranks.
std::string encode_manifest(const CheckpointHeader& header, int64_t world_size, const std::string& save_id,
                            const ShardedManifest& tensors);
/// COMPLETE's text: the world size and the manifest's checksum.
std::string encode_marker(int64_t world_size, const std::string& manifest_text);
/// Parses and checks both texts (format, version, the manifest's checksum, world sizes, piece
/// ranks). Throws CheckpointError naming `path` and the problem.
Manifest decode_manifest(const std::string& manifest_text, const std::string& marker_text, const std::string& path);

}  // namespace volt::detail
