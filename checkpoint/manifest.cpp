#include "volt/checkpoint/manifest.h"

#include "volt/checkpoint/tensor_archive.h"
#include "volt/core/errors.h"
#include "volt/core/yaml_load.h"

namespace volt::detail {

std::string encode_manifest(const CheckpointHeader& header, int64_t world_size, const std::string& save_id,
                            const ShardedManifest& tensors) {
  YAML::Node m(YAML::NodeType::Map);
  m["format"] = "volt-sharded";
  m["format_version"] = kCheckpointFormatVersion;
  m["world_size"] = world_size;
  m["save_id"] = save_id;
  for (int64_t r = 0; r < world_size; ++r) m["files"].push_back(shard_file_name(r));
  m["epoch"] = header.epoch;
  m["global_step"] = header.global_step;
  m["checkpoint"] = YAML::Clone(header.meta);
  for (const auto& [section, by_name] : tensors)
    for (const auto& [name, t] : by_name) {
      YAML::Node n(YAML::NodeType::Map);
      n["dtype"] = dtype_name(t.dtype);
      n["shape"] = YAML::Node(YAML::NodeType::Sequence);
      for (auto d : t.shape) n["shape"].push_back(d);
      n["shape"].SetStyle(YAML::EmitterStyle::Flow);
      for (const auto& p : t.pieces) {
        YAML::Node piece(YAML::NodeType::Sequence);
        piece.push_back(p.rank);
        piece.push_back(p.start);
        piece.push_back(p.length);
        piece.SetStyle(YAML::EmitterStyle::Flow);
        n["pieces"].push_back(piece);
      }
      m["tensors"][section][name] = n;
    }
  return YAML::Dump(m);
}

std::string encode_marker(int64_t world_size, const std::string& manifest_text) {
  const std::string sum = hex64(xxh64(manifest_text.data(), manifest_text.size()));
  return "world_size: " + std::to_string(world_size) + "\nmanifest_xxh64: \"" + sum + "\"\n";
}

Manifest decode_manifest(const std::string& text, const std::string& marker_text, const std::string& path) {
  YAML::Node marker, m;
  try {
    marker = load_checkpoint_yaml(marker_text, str_cat("sharded checkpoint '", path, "': COMPLETE"));
    const std::string sum = hex64(xxh64(text.data(), text.size()));
    VOLT_CHECK(marker["manifest_xxh64"] && marker["manifest_xxh64"].as<std::string>() == sum, CheckpointError,
               "sharded checkpoint '", path,
               "': manifest.yaml does not match its checksum in COMPLETE (corrupted or edited)");
    m = load_checkpoint_yaml(text, str_cat("sharded checkpoint '", path, "': manifest.yaml"));
  } catch (const YAML::Exception& e) {
    throw CheckpointError(str_cat("sharded checkpoint '", path, "': unreadable manifest or marker: ", e.what()));
  }
  VOLT_CHECK(m["format"] && m["format"].as<std::string>() == "volt-sharded", CheckpointError, "'", path,
             "/manifest.yaml' is not a volt sharded manifest");
  const int64_t fv = m["format_version"].as<int64_t>();
  VOLT_CHECK(fv == kCheckpointFormatVersion, CheckpointError, "sharded checkpoint '", path, "' has format version ", fv,
             "; this volt reads version ", kCheckpointFormatVersion);
  Manifest out;
  out.world_size = m["world_size"].as<int64_t>();
  VOLT_CHECK(marker["world_size"].as<int64_t>() == out.world_size, CheckpointError, "sharded checkpoint '", path,
             "': COMPLETE and manifest.yaml disagree on the world size");
  VOLT_CHECK(m["save_id"], CheckpointError, "sharded checkpoint '", path, "': the manifest has no save_id (damaged)");
  out.save_id = m["save_id"].as<std::string>();
  out.files = m["files"].as<std::vector<std::string>>();
  VOLT_CHECK(static_cast<int64_t>(out.files.size()) == out.world_size, CheckpointError, "sharded checkpoint '", path,
             "': the manifest lists ", out.files.size(), " files for a world of ", out.world_size);
  out.epoch = m["epoch"].as<int64_t>();
  out.global_step = m["global_step"].as<int64_t>();
  out.meta = m["checkpoint"] ? m["checkpoint"] : YAML::Node(YAML::NodeType::Map);
  if (m["tensors"])
    for (const auto& sec : m["tensors"])
      for (const auto& kv : sec.second) {
        const std::string section = sec.first.as<std::string>(), name = kv.first.as<std::string>();
        ShardedTensor t;
        t.dtype = dtype_from_name(kv.second["dtype"].as<std::string>(), "sharded checkpoint '" + path + "'");
        t.shape = kv.second["shape"].as<std::vector<int64_t>>();
        t.numel = 1;
        for (auto d : t.shape) t.numel *= d;
        for (const auto& p : kv.second["pieces"]) {
          ShardedTensor::Piece piece{p[0].as<int64_t>(), p[1].as<int64_t>(), p[2].as<int64_t>()};
          VOLT_CHECK(piece.rank >= 0 && piece.rank < out.world_size, CheckpointError, "sharded checkpoint '", path,
                     "': tensor '", section, "/", name, "' has a piece on rank ", piece.rank);
          t.pieces.push_back(piece);
        }
        out.tensors[section][name] = std::move(t);
      }
  return out;
}

}  // namespace volt::detail
