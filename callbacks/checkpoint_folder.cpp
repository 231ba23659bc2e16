#include "volt/callbacks/checkpoint_folder.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <regex>
#include <utility>

#include "volt/checkpoint/temp_file.h"
#include "volt/core/errors.h"

namespace volt::detail {

namespace fs = std::filesystem;

std::string newest_last_checkpoint(const std::string& dir) {
  // As Lightning's "last": the newest of last.ckpt and its versions (last-v1.ckpt, ...), which a
  // run writes when an earlier run's last.ckpt is in the folder.
  static const std::regex last_name(R"(^last(-v[0-9]+)?\.ckpt$)");
  std::error_code ec;
  std::string newest, dangling;
  fs::file_time_type newest_time{};
  struct timespec dangling_time {};
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!std::regex_match(name, last_name)) continue;
    std::error_code tec;
    const auto when = fs::last_write_time(e.path(), tec);  // follows a link
    if (tec) {
      struct stat st {};
      if (fs::is_symlink(e.path(), tec) && ::lstat(e.path().c_str(), &st) == 0 &&
          (dangling.empty() || std::make_pair(st.st_mtim.tv_sec, st.st_mtim.tv_nsec) >
                                   std::make_pair(dangling_time.tv_sec, dangling_time.tv_nsec))) {
        dangling = e.path().string();
        dangling_time = st.st_mtim;
      }
      continue;
    }
    // Equal times (a coarse clock): the higher version is the later one.
    const bool later =
        newest.empty() || when > newest_time ||
        (when == newest_time &&
         (name.size() > fs::path(newest).filename().string().size() ||
          (name.size() == fs::path(newest).filename().string().size() && name > fs::path(newest).filename().string())));
    if (later) {
      newest = e.path().string();
      newest_time = when;
    }
  }
  // A dangling link newer than every whole last checkpoint was the run's latest: resuming from an
  // older one would silently go back. (The link's own time: when it was made to point there.)
  auto newer_than_newest = [&] {
    struct stat st {};
    if (newest.empty() || ::stat(newest.c_str(), &st) != 0) return true;
    return std::make_pair(dangling_time.tv_sec, dangling_time.tv_nsec) >
           std::make_pair(st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
  };
  if (!dangling.empty() && newer_than_newest()) {
    std::error_code rec;
    throw CheckpointError(detail::str_cat("'", dangling, "' is a link to '", fs::read_symlink(dangling, rec).string(),
                                          "', which no longer exists; resume from another checkpoint in '", dir, "'"));
  }
  if (newest.empty() || !fs::is_symlink(newest, ec)) return newest;
  const std::string target = fs::canonical(newest, ec).string();  // resume from the link's target
  return ec ? newest : target;
}

namespace {
/// The checkpoint folders this process has locked, by canonical path: the ModelCheckpoints of one
/// Trainer share a folder's lock (flock excludes a second descriptor even in the same process).
std::mutex folder_locks_mutex;
std::map<std::string, std::weak_ptr<CheckpointFolderLock>> folder_locks;

}  // namespace

/// Rank 0's part of setup: lock, clean, warn. Returns "" or the reason the run cannot use `d`.
std::string prepare_checkpoint_folder(const std::string& d, const void* owner, bool version_counter,
                                      std::shared_ptr<CheckpointFolderLock>& lock) {
  std::error_code ec;
  fs::create_directories(d, ec);
  if (ec) return "cannot create the checkpoint folder '" + d + "': " + ec.message();
  std::lock_guard<std::mutex> guard(folder_locks_mutex);
  const std::string key = fs::weakly_canonical(d, ec).string();
  if (auto held = folder_locks[key].lock()) {
    if (held->owner != owner)
      return "another Trainer of this process is writing checkpoints to '" + d +
             "'; give this run its own trainer.default_root_dir (or ModelCheckpoint.dirpath)";
    lock = held;  // another ModelCheckpoint of this run: the folder is already prepared
    return {};
  }
  auto fresh = std::make_shared<CheckpointFolderLock>();
  fresh->owner = owner;
  const std::string held = fresh->lock.try_lock(d);
  if (!held.empty())
    return "another run is writing checkpoints to '" + d + "' (its lock is " + held +
           "); give this run its own trainer.default_root_dir (or ModelCheckpoint.dirpath)";
  folder_locks[key] = fresh;
  lock = std::move(fresh);
  bool earlier = false;
  for (const auto& e : fs::directory_iterator(d, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() > 8 && name.compare(name.size() - 8, 8, ".partial") == 0) {
      spdlog::warn("Removing '{}': an interrupted {} left it", e.path().string(),
                   name.find(".removed.partial") != std::string::npos
                       ? "removal of a checkpoint"
                       : "save (the checkpoint it was replacing is intact)");
      detail::remove_tree(e.path().string());
    } else if (stale_temp(name)) {
      spdlog::warn("Removing '{}': an interrupted save left it", e.path().string());
      detail::remove_tree(e.path().string());
    } else if (name.size() > 5 && name.compare(name.size() - 5, 5, ".ckpt") == 0) {
      earlier = true;
    }
  }
  if (earlier)
    spdlog::warn("Checkpoint folder '{}' already holds checkpoints of an earlier run; {}", d,
                 version_counter ? "a checkpoint of this run whose name is taken gets a version suffix (-v1, -v2, ...; "
                                   "last.ckpt too: ckpt_path=last takes the newest)"
                                 : "this run replaces those of the same name (last.ckpt among them)");
  return {};
}

}  // namespace volt::detail
