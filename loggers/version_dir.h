#pragma once
/// The version folders Lightning's CSVLogger and TensorBoardLogger share:
/// <save_dir>/<name>/version_<N>.
#include <cstdint>
#include <string>

namespace volt::detail {

/// One more than the largest N of the version_N folders in <save_dir>/<name> (0 when there are
/// none, or the folder does not exist).
int64_t next_version(const std::string& save_dir, const std::string& name);

/// Creates <save_dir>/<name>/version_<version> (version < 0: next_version(), claimed by creating the
/// folder, so that two runs starting at once in one log root get distinct versions) and returns its
/// path; `version` is set to the number used. An explicit version whose folder already holds an earlier
/// run's metrics.csv, hparams.yaml or config.yaml is warned about (this run replaces them), as
/// Lightning warns. Throws ConfigError naming the folder when it cannot be created.
std::string make_version_dir(const std::string& save_dir, const std::string& name, int64_t& version);

}  // namespace volt::detail
