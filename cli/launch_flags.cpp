#include "volt/cli/launch_flags.h"

#include <unistd.h>

#include <cstdlib>

#include "volt/core/errors.h"

namespace volt::detail {

namespace {
int64_t integer_flag(const std::string& key, const std::string& value, int64_t lo, int64_t hi) {
  try {
    size_t pos = 0;
    const int64_t v = std::stoll(value, &pos);
    if (pos == value.size() && v >= lo && v <= hi) return v;
  } catch (...) {
  }
  throw ConfigError(str_cat("option --", key, ": expected an integer from ", lo, " to ", hi, ", got '", value, "'"));
}
}  // namespace

const std::vector<std::string>& launch_flag_names() {
  static const std::vector<std::string> names = {"node_rank", "master_addr", "master_port"};
  return names;
}

bool is_launch_flag(const std::string& key) {
  for (const auto& n : launch_flag_names())
    if (key == n) return true;
  return false;
}

void export_launch_flags(const std::map<std::string, std::string>& flags) {
  // A rank that volt launched (a launcher's child, or a restart agent's rank) runs the same command
  // line, but its launcher has set its variables: a restart agent gives each attempt's ranks a port
  // of their own, which the command line's --master_port must not replace. Checked all the same.
  const char* launcher = std::getenv("VOLT_LAUNCHER_PID");
  const bool launched = launcher && std::atoll(launcher) != static_cast<long long>(::getpid());
  for (const auto& [key, value] : flags) {
    if (launched) {
      if (key == "node_rank") integer_flag(key, value, 0, 1 << 20);
      if (key == "master_port") integer_flag(key, value, 1, 65535);
      continue;
    }
    if (key == "node_rank") {
      ::setenv("NODE_RANK", std::to_string(integer_flag(key, value, 0, 1 << 20)).c_str(), 1);
    } else if (key == "master_port") {
      ::setenv("MASTER_PORT", std::to_string(integer_flag(key, value, 1, 65535)).c_str(), 1);
    } else if (key == "master_addr") {
      VOLT_CHECK(!value.empty() && value.find_first_of(" \t\n") == std::string::npos, ConfigError,
                 "option --master_addr: expected a host name or address, got '", value, "'");
      ::setenv("MASTER_ADDR", value.c_str(), 1);
    } else {
      throw ConfigError(str_cat("option --", key, " is not a launch flag"));
    }
  }
}

}  // namespace volt::detail
