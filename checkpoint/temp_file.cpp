#include "volt/checkpoint/temp_file.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

namespace volt::detail {

namespace fs = std::filesystem;

namespace {
bool all_digits(const std::string& s) { return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos; }

/// The pid of "<...>.tmp.<pid>" or "<...>.tmp.<pid>.<n>", or "" when `name` is neither.
std::string temp_pid(const std::string& name) {
  const auto at = name.rfind(".tmp.");
  if (at == std::string::npos) return {};
  std::string rest = name.substr(at + 5);
  const auto dot = rest.find('.');
  if (dot != std::string::npos) {
    if (!all_digits(rest.substr(dot + 1))) return {};
    rest.resize(dot);
  }
  return all_digits(rest) && rest.size() < 10 ? rest : std::string();
}
}  // namespace

bool stale_temp(const std::string& name) {
  const std::string pid = temp_pid(name);
  if (pid.empty()) return false;
  const long long n = std::stoll(pid);
  if (n <= 0) return false;
  return ::kill(static_cast<pid_t>(n), 0) != 0 && errno == ESRCH;
}

std::string claim_temp_sibling(const std::string& path, const std::string& suffix) {
  const fs::path target(path);
  const std::string prefix = target.filename().string() + ".tmp.";
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.compare(0, prefix.size(), prefix) != 0 || !stale_temp(name)) continue;
    std::error_code sec, rec;
    if (fs::is_directory(it->path(), sec)) continue;  // not a file volt writes
    const auto bytes = fs::file_size(it->path(), sec);
    if (fs::remove(it->path(), rec))
      spdlog::warn("Removed '{}' ({} bytes): an interrupted write of '{}' left it", it->path().string(),
                   sec ? 0 : bytes, path);
    else if (rec)
      spdlog::warn("Cannot remove '{}', which an interrupted write of '{}' left: {}", it->path().string(), path,
                   rec.message());
  }
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  if (!suffix.empty()) tmp += "." + suffix;
  return tmp;
}

}  // namespace volt::detail
