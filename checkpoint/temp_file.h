#pragma once
/// The temporary siblings of volt's atomic writes. Every file volt writes for good (checkpoints,
/// safetensors, manifests, token files) is written to a temporary sibling and renamed over `path`
/// once complete, so a reader never sees half a file. The sibling is named
/// "<path>.tmp.h<tag>.<pid>[.<n>]": <tag> is 8 hex digits of this host's name and pid namespace,
/// so that hosts (or containers) sharing a filesystem can tell their own writers' files apart.
///
/// A writer that is killed (SIGKILL, a lost host) leaves its sibling behind: as large as the file
/// it was writing, and invisible to anyone who looks for checkpoints. The next large write of the
/// same path (claim_temp_sibling) removes such leftovers of this host's dead processes.
#include <string>

namespace volt::detail {

/// This host's tag: 8 hex digits of a hash of its host name and the inode of this process's pid
/// namespace (processes that can see each other's pids share it).
std::string host_tag();

/// "<path>.tmp.h<host_tag()>.<pid>", plus ".<suffix>" when `suffix` is not empty.
std::string temp_sibling_name(const std::string& path, long pid, const std::string& suffix = {});

/// True when `name` is a temporary sibling (any path's) of a process that can no longer finish it:
/// tagged with this host's tag and a pid that no process here has; or untagged ("<x>.tmp.<pid>",
/// volt's names before tags, and a `last.ckpt` link's temporary) with such a pid. A live pid (even
/// an unrelated process that reused the number) or another host's tag keeps the file.
bool stale_temp(const std::string& name);

/// Removes every temporary sibling of `path` that is a file or a link, tagged with this host's tag
/// and a pid no process here has, with a warning naming it (untagged names are left: a user's own
/// file may be called "<path>.tmp.7"), and returns temp_sibling_name(path, getpid(), suffix). For the writers of
/// large files (checkpoints, safetensors, token files): it lists the folder. Errors while removing
/// are warned about and otherwise ignored: they never stop the write.
std::string claim_temp_sibling(const std::string& path, const std::string& suffix = {});

}  // namespace volt::detail
