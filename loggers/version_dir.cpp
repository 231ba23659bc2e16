#include "volt/loggers/version_dir.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>

#include "volt/core/errors.h"

namespace volt::detail {

namespace fs = std::filesystem;

int64_t next_version(const std::string& save_dir, const std::string& name) {
  const fs::path base = fs::path(save_dir) / name;
  std::error_code ec;
  int64_t next = 0;
  if (!fs::is_directory(base, ec)) return next;
  for (const auto& e : fs::directory_iterator(base, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("version_", 0) != 0) continue;
    try {
      size_t used = 0;
      const int64_t v = std::stoll(n.substr(8), &used);
      if (used == n.size() - 8 && v >= 0) next = std::max<int64_t>(next, v + 1);
    } catch (...) {  // version_abc: not ours
    }
  }
  return next;
}

std::string make_version_dir(const std::string& save_dir, const std::string& name, int64_t& version) {
  const fs::path base = fs::path(save_dir) / name;
  std::error_code ec;
  fs::create_directories(base, ec);
  VOLT_CHECK(!ec, ConfigError, "cannot create log directory '", base.string(), "': ", ec.message());
  const bool explicit_version = version >= 0;
  if (!explicit_version) {
    // Claimed by mkdir, which fails on an existing folder: two runs starting at once in one log
    // root get two versions (the scan alone would give both the same).
    version = next_version(save_dir, name);
    for (int tries = 0;; ++tries, ++version) {
      const fs::path dir = base / ("version_" + std::to_string(version));
      if (fs::create_directory(dir, ec)) return dir.string();
      const bool taken = !ec || ec == std::errc::file_exists;  // a folder, or a file of that name
      VOLT_CHECK(taken && tries < 999, ConfigError, "cannot create log directory '", dir.string(),
                 "': ", taken ? std::string("it and the 999 versions before it are taken") : ec.message());
    }
  }
  const std::string dir = (base / ("version_" + std::to_string(version))).string();
  std::string earlier;
  for (const char* f : {"metrics.csv", "hparams.yaml", "config.yaml"})
    if (fs::exists(fs::path(dir) / f, ec)) earlier += (earlier.empty() ? "" : ", ") + std::string(f);
  if (!earlier.empty())
    spdlog::warn(
        "logger: the log directory '{}' (version {}) already holds an earlier run's {}; this run replaces them. "
        "Leave version unset for a new version_N folder",
        dir, version, earlier);
  fs::create_directories(dir, ec);
  VOLT_CHECK(!ec, ConfigError, "cannot create log directory '", dir, "': ", ec.message());
  return dir;
}

}  // namespace volt::detail
