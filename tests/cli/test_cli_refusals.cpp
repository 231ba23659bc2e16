// Configs the CLI used to take silently: a whole section set to null on the command line (which
// dropped what the config files set), and seeds Lightning's seed_everything refuses.
#include <yaml-cpp/yaml.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "boring_model.h"
#include "cli/toy_classes.h"
#include "volt/cli/cli.h"
#include "volt/core/errors.h"
#include "volt/core/options.h"
#include "volt/trainer/trainer_options.h"

using namespace volt;
using namespace volt::testing;
using Catch::Matchers::Contains;

namespace {
std::string write_config(const std::string& text) {
  const std::string path = temp_dir("cli-refusals") + "/cfg.yaml";
  std::ofstream(path) << text;
  return path;
}

/// Puts back NODE_RANK, MASTER_ADDR and MASTER_PORT, which the launch flags set in this process.
struct LaunchEnvScope {
  std::map<std::string, std::string> saved;
  LaunchEnvScope() {
    for (const char* k : {"NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "VOLT_LAUNCHER_PID"}) {
      if (const char* v = std::getenv(k)) saved[k] = v;
      ::unsetenv(k);
    }
  }
  ~LaunchEnvScope() {
    for (const char* k : {"NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "VOLT_LAUNCHER_PID"}) ::unsetenv(k);
    for (const auto& [k, v] : saved) ::setenv(k.c_str(), v.c_str(), 1);
  }
};
}  // namespace

TEST_CASE("CLI: --trainer=null (or model, data) is refused, naming the key", "[cli][refusals]") {
  const std::string cfg = write_config("trainer: {max_steps: 4}\nmodel: ToyNet\n");
  for (const std::string arg : {"--trainer=null", "--trainer=~", "--trainer=", "--model=null", "--data=null"}) {
    INFO(arg);
    CLI cli;
    std::vector<std::string> log;
    register_toys(cli, &log);
    const MainRun r = run_main(cli, {"fit", "--config", cfg, arg, "--print_config"});
    CHECK(r.code == 2);
    const std::string key = arg.substr(2, arg.find('=') - 2);
    CHECK_THAT(r.err, Contains("override --" + key + "=") && Contains("whole '" + key + "' section") &&
                          Contains("--" + key + ".KEY=VALUE"));
  }
  // Through the library's loader too; a key of the section may still be null.
  CHECK_THROWS_AS(cli::load_configs({cfg}, {"trainer=null"}), ConfigError);
  CHECK(cli::load_configs({cfg}, {"trainer.max_steps=null"})["trainer"]["max_steps"].IsNull());
}

TEST_CASE("seed_everything and trainer.seed outside 0..2^32-1 are refused, as Lightning", "[cli][refusals]") {
  for (const std::string seed : {"-1", "4294967296", "-9000000000"}) {
    INFO(seed);
    CLI cli;
    std::vector<std::string> log;
    register_toys(cli, &log);
    const std::string cfg = write_config("seed_everything: " + seed + "\nmodel: ToyNet\n");
    const MainRun r = run_main(cli, {"fit", "--config", cfg, "--print_config"});
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Contains("'seed_everything'") && Contains(seed) && Contains("4294967295"));

    TrainerOptions o;
    o.seed = std::stoll(seed);
    try {
      o.validate();
      FAIL("trainer.seed " << seed << " was accepted");
    } catch (const ConfigError& e) {
      CHECK_THAT(e.what(), Contains("'trainer.seed'") && Contains(seed));
    }
  }
  TrainerOptions edge;
  for (int64_t ok : {int64_t{0}, int64_t{4294967295}}) {
    edge.seed = ok;
    CHECK_NOTHROW(edge.validate());
  }
}

TEST_CASE("a node rank outside trainer.num_nodes, or no master port for several nodes, is a config error (exit 2)",
          "[cli][refusals][launch]") {
  // Exit code 2 tells a restart agent or a scheduler that a retry would meet the same error.
  const std::string cfg = write_config(
      "trainer: {max_steps: 1, accelerator: cpu, devices: 1, num_nodes: 2, strategy: ddp, enable_progress_bar: false}\n"
      "model: ToyNet\ndata: ToyData\n");
  struct Case {
    std::vector<std::string> flags;
    std::vector<std::string> said;
  };
  const std::vector<Case> cases = {
      {{"--node_rank=2", "--master_addr=127.0.0.1", "--master_port=29555"}, {"node rank 2", "trainer.num_nodes"}},
      {{"--node_rank=-1", "--master_addr=127.0.0.1", "--master_port=29555"}, {"--node_rank", "-1"}},
      {{"--node_rank=1", "--master_addr=127.0.0.1"}, {"master's port", "--master_port"}},
      {{"--node_rank=1"}, {"--master_addr"}},
  };
  for (const auto& c : cases) {
    INFO(c.flags.front() << " " << c.flags.size());
    LaunchEnvScope env;
    CLI cli;
    std::vector<std::string> log;
    register_toys(cli, &log);
    std::vector<std::string> args{"fit", "--config", cfg};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    const MainRun r = run_main(cli, args);
    INFO(r.err);
    CHECK(r.code == 2);
    for (const auto& s : c.said) CHECK_THAT(r.err, Contains(s));
  }
}
