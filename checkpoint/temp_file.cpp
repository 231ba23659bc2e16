#include "volt/checkpoint/temp_file.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>

namespace volt::detail {

namespace fs = std::filesystem;

namespace {
bool all_digits(const std::string& s) { return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos; }

bool all_hex(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

/// The parts of a temporary sibling's name after ".tmp.": an optional tag, a pid and an optional
/// writer number. False when `name` is not one.
bool parse_temp(const std::string& name, std::string& tag, long long& pid) {
  const auto at = name.rfind(".tmp.");
  if (at == std::string::npos) return false;
  std::string rest = name.substr(at + 5);
  tag.clear();
  if (rest.size() > 10 && rest[0] == 'h' && rest[9] == '.' && all_hex(rest.substr(1, 8))) {
    tag = rest.substr(1, 8);
    rest = rest.substr(10);
  }
  const auto dot = rest.find('.');
  if (dot != std::string::npos) {
    if (!all_digits(rest.substr(dot + 1))) return false;
    rest.resize(dot);
  }
  if (!all_digits(rest) || rest.size() > 9) return false;
  pid = std::stoll(rest);
  return pid > 0;
}

/// No process `pid` on this host (a live one, even one that reused the number, keeps its file).
bool process_gone(long long pid) { return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH; }
}  // namespace

std::string host_tag() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  struct stat st {};
  const unsigned long long ns = ::stat("/proc/self/ns/pid", &st) == 0 ? static_cast<unsigned long long>(st.st_ino) : 0;
  // FNV-1a: stable across builds and processes, unlike std::hash.
  uint64_t h = 1469598103934665603ull;
  const std::string key = std::string(host) + "/" + std::to_string(ns);
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  char out[9];
  std::snprintf(out, sizeof(out), "%08llx", static_cast<unsigned long long>((h ^ (h >> 32)) & 0xffffffffull));
  return out;
}

std::string temp_sibling_name(const std::string& path, long pid, const std::string& suffix) {
  std::string tmp = path + ".tmp.h" + host_tag() + "." + std::to_string(pid);
  if (!suffix.empty()) tmp += "." + suffix;
  return tmp;
}

bool stale_temp(const std::string& name) {
  std::string tag;
  long long pid = 0;
  if (!parse_temp(name, tag, pid)) return false;
  if (!tag.empty() && tag != host_tag()) return false;  // another host's writer: it may be alive
  return process_gone(pid);
}

std::string claim_temp_sibling(const std::string& path, const std::string& suffix) {
  const fs::path target(path);
  const std::string prefix = target.filename().string() + ".tmp.";
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string own = host_tag();
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::string tag;
    long long pid = 0;
    // Tagged names only: an untagged "<path>.tmp.<n>" may be a user's own file.
    if (name.compare(0, prefix.size(), prefix) != 0 || !parse_temp(name, tag, pid) || tag != own || !process_gone(pid))
      continue;
    std::error_code sec, rec;
    const auto status = fs::symlink_status(it->path(), sec);
    if (sec || fs::is_directory(status)) continue;  // not a file volt writes
    const auto bytes = fs::is_regular_file(status) ? fs::file_size(it->path(), sec) : 0;
    if (fs::remove(it->path(), rec))
      spdlog::warn("Removed '{}' ({} bytes): an interrupted write of '{}' left it", it->path().string(),
                   sec ? 0 : bytes, path);
    else if (rec)
      spdlog::warn("Cannot remove '{}', which an interrupted write of '{}' left: {}", it->path().string(), path,
                   rec.message());
  }
  return temp_sibling_name(path, static_cast<long>(::getpid()), suffix);
}

}  // namespace volt::detail
