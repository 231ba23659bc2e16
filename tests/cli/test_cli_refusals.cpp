// Configs the CLI used to take silently: a whole section set to null on the command line (which
// dropped what the config files set), and seeds Lightning's seed_everything refuses.
#include <yaml-cpp/yaml.h>

#include <catch2/catch.hpp>
#include <fstream>
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
