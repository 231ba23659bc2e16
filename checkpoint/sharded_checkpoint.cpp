#include "volt/checkpoint/sharded_checkpoint.h"

#include <fcntl.h>
#include <stdio.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "volt/checkpoint/manifest.h"
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

std::string new_save_id() {
  std::random_device rd;
  const uint64_t bits = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
                        static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return hex64(bits & ((uint64_t{1} << 48) - 1));
}

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

ShardedCheckpointWriter::ShardedCheckpointWriter(std::string dir, int64_t rank, int64_t world_size, std::string save_id,
                                                 Agree agree)
    : dir_(std::move(dir)),
      staging_(dir_ + ".partial"),
      rank_(rank),
      world_size_(world_size),
      save_id_(std::move(save_id)),
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

ShardedCheckpointWriter::ShardedCheckpointWriter(std::string dir, int64_t rank, int64_t world_size, Agree agree)
    : ShardedCheckpointWriter(std::move(dir), rank, world_size, detail::new_save_id(), std::move(agree)) {
  VOLT_CHECK(world_size == 1, CheckpointError, "ShardedCheckpointWriter: a world of ", world_size,
             " needs one save id shared by all ranks (the constructor that takes save_id)");
}

void ShardedCheckpointWriter::phase(const std::string& what, std::string error) {
  try {
    agree_(error, "saving sharded checkpoint '" + dir_ + "' (" + what + ")");
  } catch (...) {
    file_.reset();                                  // removes this rank's temporary file
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
  meta["save_id"] = save_id_;
  header_ = header;
  if (error.empty()) try {
      file_->commit(fields, meta);
    } catch (const std::exception& e) {
      error = e.what();
    }
  if (deferred_) {
    phase("copying the state aside", error);
    return;
  }
  finish(error);
}

void ShardedCheckpointWriter::defer_writes() {
  file_->defer_writes();
  deferred_ = true;
}

std::string ShardedCheckpointWriter::write_deferred() {
  try {
    file_->write_deferred();
    return {};
  } catch (const std::exception& e) {
    return e.what();
  }
}

void ShardedCheckpointWriter::finish(std::string error) {
  phase("writing the shard files", error);
  if (rank_ == 0) try {
      write_manifest();
    } catch (const std::exception& e) {
      error = e.what();
    }
  phase("writing the manifest", error);
}

void ShardedCheckpointWriter::write_manifest() {
  const std::string text = detail::encode_manifest(header_, world_size_, save_id_, manifest_);
  detail::atomic_write((fs::path(staging_) / kManifestFile).string(), text.data(), text.size());
  const std::string marker = detail::encode_marker(world_size_, text);
  detail::atomic_write((fs::path(staging_) / kCompleteMarker).string(), marker.data(), marker.size());
  detail::swap_into_place(staging_, dir_);
}

bool ShardedCheckpointWriter::finish_without_agreement(double timeout_s) {
  if (rank_ != 0) return true;  // rank 0 completes it
  // A rank file carries its save's id: one left by another save is never assembled.
  auto written = [&](int64_t r) {
    const std::string f = (fs::path(staging_) / shard_file_name(r)).string();
    if (!detail::path_exists(f)) return false;
    try {
      const YAML::Node id = ArchiveReader(f).meta()["save_id"];
      return id && id.as<std::string>() == save_id_;
    } catch (const std::exception&) {
      return false;
    }
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (int64_t r = 0; r < world_size_; ++r)
    while (!written(r)) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  try {
    write_manifest();
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace volt
