// The launch flags (--node_rank, --master_addr, --master_port): what they set, what they refuse, and
// that a rank volt launched keeps the variables its launcher gave it.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <map>
#include <string>

#include "volt/cli/launch_flags.h"
#include "volt/core/errors.h"

using volt::ConfigError;
using volt::detail::export_launch_flags;

namespace {
/// Sets or unsets variables for its lifetime, then puts back what was there.
struct EnvScope {
  std::map<std::string, std::pair<bool, std::string>> saved;
  explicit EnvScope(const std::map<std::string, const char*>& vars) {
    for (const auto& [k, v] : vars) {
      const char* old = std::getenv(k.c_str());
      saved[k] = {old != nullptr, old ? old : ""};
      if (v)
        ::setenv(k.c_str(), v, 1);
      else
        ::unsetenv(k.c_str());
    }
  }
  ~EnvScope() {
    for (const auto& [k, v] : saved)
      if (v.first)
        ::setenv(k.c_str(), v.second.c_str(), 1);
      else
        ::unsetenv(k.c_str());
  }
};

std::string env(const char* k) {
  const char* v = std::getenv(k);
  return v ? v : "<unset>";
}
}  // namespace

TEST_CASE("launch flags set NODE_RANK, MASTER_ADDR and MASTER_PORT, and refuse bad values", "[cli][launch]") {
  EnvScope scope(
      {{"VOLT_LAUNCHER_PID", nullptr}, {"NODE_RANK", nullptr}, {"MASTER_ADDR", nullptr}, {"MASTER_PORT", nullptr}});
  export_launch_flags({{"node_rank", "1"}, {"master_addr", "10.0.0.1"}, {"master_port", "29500"}});
  CHECK(env("NODE_RANK") == "1");
  CHECK(env("MASTER_ADDR") == "10.0.0.1");
  CHECK(env("MASTER_PORT") == "29500");
  CHECK_THROWS_AS(export_launch_flags({{"master_port", "70000"}}), ConfigError);
  CHECK_THROWS_AS(export_launch_flags({{"node_rank", "-1"}}), ConfigError);
  CHECK_THROWS_AS(export_launch_flags({{"master_addr", ""}}), ConfigError);
}

TEST_CASE("a rank volt launched keeps its launcher's MASTER_PORT (a restart agent's per-attempt port)",
          "[cli][launch][agent]") {
  // The restart agent's ranks run the agent's command line, --master_port included; the port they
  // rendezvous on is the attempt's, which the agent set. Replacing it made the ranks meet in the
  // agents' own store (found by scripts/soak.py --hosts 2 --max_restarts 2).
  const std::string parent = std::to_string(::getppid());
  EnvScope scope({{"VOLT_LAUNCHER_PID", parent.c_str()},
                  {"NODE_RANK", "1"},
                  {"MASTER_PORT", "41234"},
                  {"MASTER_ADDR", "10.0.0.1"}});
  export_launch_flags({{"node_rank", "1"}, {"master_addr", "10.0.0.1"}, {"master_port", "29500"}});
  CHECK(env("MASTER_PORT") == "41234");
  CHECK(env("NODE_RANK") == "1");
  // Still checked: a bad flag is an error in every process.
  CHECK_THROWS_AS(export_launch_flags({{"master_port", "0"}}), ConfigError);
  // The launcher itself (VOLT_LAUNCHER_PID is its own pid) applies them.
  const std::string self = std::to_string(::getpid());
  ::setenv("VOLT_LAUNCHER_PID", self.c_str(), 1);
  export_launch_flags({{"master_port", "29500"}});
  CHECK(env("MASTER_PORT") == "29500");
}
