#pragma once
/// ModelCheckpoint's folder: its lock for one run, the clean-up of what interrupted saves left, and
/// the "last" checkpoint ckpt_path=last resumes from.
#include <memory>
#include <string>

#include "volt/core/files.h"

namespace volt::detail {

/// A checkpoint folder's lock, shared by the ModelCheckpoints of the Trainer (`owner`) that took it.
struct CheckpointFolderLock {
  FileLock lock;
  const void* owner = nullptr;
};

/// Rank 0's part of ModelCheckpoint::setup: creates `dir`, locks it for `owner` (or shares the lock
/// `owner` holds already), removes what interrupted saves left (`*.partial` folders, `*.tmp.[h<tag>.]<pid>`
/// files of dead processes) and warns when it holds an earlier run's checkpoints. Returns "" or the
/// reason this run cannot write there; `lock` holds the lock on success.
std::string prepare_checkpoint_folder(const std::string& dir, const void* owner, bool version_counter,
                                      std::shared_ptr<CheckpointFolderLock>& lock);

/// The newest (by modification time) of `dir`'s last.ckpt and last-v<N>.ckpt, a link followed to
/// its target; "" if none. CheckpointError when that last.ckpt is a link whose target is gone.
std::string newest_last_checkpoint(const std::string& dir);

}  // namespace volt::detail
