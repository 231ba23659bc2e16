#pragma once
/// The temporary siblings of volt's atomic writes. Every file volt writes for good (checkpoints,
/// safetensors, manifests, token files) is written to "<path>.tmp.<pid>[.<n>]" and renamed over
/// `path` once complete, so a reader never sees half a file. A writer that is killed (SIGKILL, a
/// lost host) leaves its temporary behind: as large as the file it was writing, and invisible to
/// anyone who looks for checkpoints. The next write of the same path removes such leftovers.
#include <string>

namespace volt::detail {

/// True when `name` ends in ".tmp.<pid>" or ".tmp.<pid>.<n>" and no process <pid> runs on this
/// host: what an interrupted atomic write left. A live <pid> (even an unrelated process that
/// reused the number) keeps the file.
bool stale_temp(const std::string& name);

/// Removes every stale temporary sibling of `path` (see stale_temp) with a warning naming it, and
/// returns the name this process writes `path` through: "<path>.tmp.<pid>", plus ".<suffix>" when
/// `suffix` is not empty (one process writing the same path from several writers). Errors while
/// removing are warned about and otherwise ignored: they never stop the write.
std::string claim_temp_sibling(const std::string& path, const std::string& suffix = {});

}  // namespace volt::detail
