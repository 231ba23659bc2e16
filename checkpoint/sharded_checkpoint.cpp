#include "volt/checkpoint/sharded_checkpoint.h"

#include <fcntl.h>
#include <stdio.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "volt/core/errors.h"
#include "volt/core/files.h"

namespace volt {

namespace fs = std::filesystem;

std::string shard_file_name(int64_t rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank_%05lld.ckpt", static_cast<long long>(rank));
  return buf;
}

namespace detail {

void swap_into_place(const std::string& src, const std::string& dst) {
  const fs::path parent = fs::path(dst).has_parent_path() ? fs::path(dst).parent_path() : fs::path(".");
  if (!path_exists(dst)) {
    VOLT_CHECK(::rename(src.c_str(), dst.c_str()) == 0, CheckpointError, "renaming '", src, "' to '", dst,
               "' failed: ", std::strerror(errno));
  } else {
#ifdef RENAME_EXCHANGE
    if (::renameat2(AT_FDCWD, src.c_str(), AT_FDCWD, dst.c_str(), RENAME_EXCHANGE) == 0) {
      fsync_dir(parent.string());
      remove_tree(src);  // the old checkpoint, now at the staging name
      return;
    }
#endif
    // No atomic exchange on this filesystem: move the old one aside first.
    const std::string old = dst + ".old";
    remove_tree(old);
    VOLT_CHECK(::rename(dst.c_str(), old.c_str()) == 0, CheckpointError, "moving the previous checkpoint '", dst,
               "' aside failed: ", std::strerror(errno));
    VOLT_CHECK(::rename(src.c_str(), dst.c_str()) == 0, CheckpointError, "renaming '", src, "' to '", dst,
               "' failed: ", std::strerror(errno), "; the previous checkpoint is at '", old, "'");
    remove_tree(old);
  }
  fsync_dir(parent.string());
}

}  // namespace detail

ShardedCheckpointWriter::ShardedCheckpointWriter(std::string dir, int64_t rank, int64_t world_size, Agree agree)
    : dir_(std::move(dir)), staging_(dir_ + ".partial"), rank_(rank), world_size_(world_size),
      agree_(std::move(agree)) {
  std::string error;
  if (rank_ == 0) {
    std::error_code ec;
    detail::remove_tree(staging_);  // left by a save that died
    fs::create_directories(staging_, ec);
    if (ec) error = detail::str_cat("cannot create the sharded checkpoint folder '", staging_, "': ", ec.message());
  }
  phase("preparing its folder", error);
  try {
    file_ = std::make_unique<ArchiveWriter>((fs::path(staging_) / shard_file_name(rank_)).string());
  } catch (const std::exception& e) {
    error = e.what();
  }
  phase("opening the shard files", error);
}

void ShardedCheckpointWriter::phase(const std::string& what, std::string error) {
  try {
    agree_(error, "saving sharded checkpoint '" + dir_ + "' (" + what + ")");
  } catch (...) {
    file_.reset();  // removes this rank's temporary file
    if (rank_ == 0) detail::remove_tree(staging_);  // the previous checkpoint at dir_ is untouched
    throw;
  }
}

void ShardedCheckpointWriter::declare(const std::string& section, const std::string& name, at::ScalarType dtype,
                                      const std::vector<int64_t>& shape, int64_t rank, int64_t start, int64_t length) {
  auto& t = manifest_[section][name];
  t.dtype = dtype;
  t.shape = shape;
  t.numel = 1;
  for (auto d : shape) t.numel *= d;
  t.pieces.push_back({rank, start, length});
}

void ShardedCheckpointWriter::commit(const CheckpointHeader& header, const std::string& local_error) {
  std::string error = local_error;
  auto fields = detail::checkpoint_fields(header);
  fields.emplace_back("rank", rank_);
  fields.emplace_back("world_size", world_size_);
  YAML::Node meta = detail::checkpoint_index_meta(header);
  meta["rank"] = rank_;
  meta["world_size"] = world_size_;
  if (error.empty()) try {
      file_->commit(fields, meta);
    } catch (const std::exception& e) {
      error = e.what();
    }
  phase("writing the shard files", error);
  if (rank_ == 0) try {
    YAML::Node m(YAML::NodeType::Map);
    m["format"] = "volt-sharded";
    m["format_version"] = kCheckpointFormatVersion;
    m["world_size"] = world_size_;
    for (int64_t r = 0; r < world_size_; ++r) m["files"].push_back(shard_file_name(r));
    m["epoch"] = header.epoch;
    m["global_step"] = header.global_step;
    m["checkpoint"] = YAML::Clone(header.meta);
    for (const auto& [section, tensors] : manifest_)
      for (const auto& [name, t] : tensors) {
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
    const std::string text = YAML::Dump(m);
    detail::atomic_write((fs::path(staging_) / kManifestFile).string(), text.data(), text.size());
    const std::string sum = detail::hex64(detail::xxh64(text.data(), text.size()));
    const std::string marker = "world_size: " + std::to_string(world_size_) + "\nmanifest_xxh64: \"" + sum + "\"\n";
    detail::atomic_write((fs::path(staging_) / kCompleteMarker).string(), marker.data(), marker.size());
    detail::swap_into_place(staging_, dir_);
  } catch (const std::exception& e) {
    error = e.what();
  }
  phase("writing the manifest", error);
}

}  // namespace volt
