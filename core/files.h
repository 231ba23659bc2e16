#pragma once
/// Small POSIX file helpers. std::filesystem::remove_all crashes (SIGSEGV) in binaries linked
/// against the PyTorch 2.x wheel: the wheel carries its own copy of parts of libstdc++'s
/// filesystem code, built for another ABI, and the dynamic linker may bind to it. These helpers
/// use the C library only. Thread-safety: as the underlying system calls.
#include <string>

namespace volt::detail {

/// Removes `path` and everything under it (no-op if absent; symlinks are removed, not followed).
/// Returns false if something could not be removed.
bool remove_tree(const std::string& path);

/// True if `path` exists (without following a final symlink).
bool path_exists(const std::string& path);

/// Replaces `path` with `data` atomically: written to a temporary file beside it (named after the
/// process), flushed to disk, then renamed over `path`. A reader sees the old file or the new one,
/// never a cut-off one (a full disk, a kill); on failure the temporary file is removed and `path`
/// is left as it was. Returns "" on success, else what failed (with the system error).
std::string write_file_atomic(const std::string& path, const std::string& data);

/// An exclusive advisory lock (flock) on an existing file or folder, held for the object's life:
/// the kernel releases it when the process dies, however it dies. Locking a folder leaves nothing
/// in it. RAII; not copyable.
class FileLock {
 public:
  FileLock() = default;
  ~FileLock();
  FileLock(FileLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  FileLock& operator=(FileLock&& o) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  /// Takes the lock without waiting. Returns "" on success, else why not: "held by another
  /// process" or the system error.
  std::string try_lock(const std::string& path);
  bool locked() const { return fd_ >= 0; }
  void unlock();

 private:
  int fd_ = -1;
};

}  // namespace volt::detail
