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

}  // namespace volt::detail
