// Ranks started with different configs (trainer/config_agreement.h): every rank fails at once with
// a ConfigError naming the key and both values, instead of waiting in different collectives (or in
// building different meshes) until the timeout; node-local keys may differ. Each rank is this test binary running the
// hidden case
// "[config_agreement_scenario]" under a simulated torchrun environment.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "distributed/multi_rank.h"
#include "volt/trainer/config_agreement.h"

using namespace volt;
using namespace volt::testing;
using Catch::Matchers::Contains;

namespace {

/// Runs 2 ranks of FSDP (max_steps 4) where rank 1 takes `edit` (max_steps=3, strategy=ddp, grad_op,
/// root=other, lr=0.5, quiet); returns each rank's outcome ("ok" or the error's type and text).
std::vector<std::string> run_ranks(const std::string& dir, const std::string& edit) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const int port = volt::detail::find_free_port();
  std::vector<std::vector<std::string>> argvs;
  std::vector<std::map<std::string, std::string>> envs;
  for (int r = 0; r < 2; ++r) {
    argvs.push_back({self, "[config_agreement_scenario]"});
    envs.push_back(torchrun_env(r, 2, port, {{"VOLT_CFG_ROOT", dir}, {"VOLT_CFG_EDIT", r == 1 ? edit : ""}}));
  }
  const auto start = std::chrono::steady_clock::now();
  const auto codes = run_processes(argvs, envs, 180, dir + "/rank");
  INFO(read_text(dir + "/rank.0.log") << read_text(dir + "/rank.1.log"));
  REQUIRE(codes == std::vector<int>{0, 0});
  // Not the collective timeout (600 s here) nor the peer watchdog: at once.
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(60));
  return {read_text(dir + "/outcome.0"), read_text(dir + "/outcome.1")};
}

/// BoringModel with its lr as hparams(), as a LightningModule's options are.
class WithHparams : public BoringModel {
 public:
  explicit WithHparams(const BoringOptions& o) : BoringModel(o), lr_(o.lr) {}
  YAML::Node hparams() const override {
    YAML::Node n(YAML::NodeType::Map);
    n["lr"] = lr_;
    return n;
  }

 private:
  double lr_;
};

}  // namespace

TEST_CASE("Config agreement scenario rank (started by the tests below)", "[.][config_agreement_scenario]") {
  const char* root = std::getenv("VOLT_CFG_ROOT");
  if (!root) return;
  const std::string rank = std::getenv("RANK");
  const std::string edit = std::getenv("VOLT_CFG_EDIT");
  TrainerOptions t = quiet_options(std::string(root) + (edit == "root=other" ? "/other" : "/run"));
  t.enable_model_summary = edit != "quiet";
  t.logger = false;
  t.enable_checkpointing = false;
  t.devices = 2;
  t.max_steps = edit == "max_steps=3" ? 3 : 4;
  t.strategy = edit == "strategy=ddp" ? "ddp" : "fsdp";
  if (edit == "grad_op") t.strategy.fsdp.sharding_strategy = "SHARD_GRAD_OP";
  t.strategy.ddp.timeout = 600;
  t.strategy.fsdp.timeout = 600;
  torch::manual_seed(1);  // the same initial weights on both ranks
  BoringOptions mo;
  mo.lr = edit == "lr=0.5" ? 0.5 : 0.25;
  WithHparams model(mo);
  DataLoader loader(std::make_shared<RandomDataset>(32), DataLoaderOptions{4, false, false, 0});
  std::string outcome = "ok";
  try {
    Trainer trainer(t);
    trainer.fit(model, loader);
  } catch (const ConfigError& e) {
    outcome = std::string("ConfigError: ") + e.what();
  } catch (const std::exception& e) {
    outcome = std::string("other: ") + e.what();
  }
  std::ofstream(std::string(root) + "/outcome." + rank) << outcome;
}

TEST_CASE("Ranks with different trainer options fail at once, every rank naming the key and both values",
          "[trainer][multirank][config_agreement]") {
  SECTION("max_steps") {
    for (const auto& o : run_ranks(temp_dir("cfg-steps"), "max_steps=3"))
      CHECK_THAT(o, Contains("ConfigError: config key 'trainer.max_steps' is '3' on rank 1 but '4' on rank 0") &&
                        Contains("start every node with the same config"));
  }
  SECTION("strategy") {
    for (const auto& o : run_ranks(temp_dir("cfg-strategy"), "strategy=ddp"))
      CHECK_THAT(
          o, Contains("ConfigError: config key 'trainer.strategy") && Contains("on rank 1 but") && Contains("fsdp"));
  }
  SECTION("sharding strategy (refused by the rendezvous, before any sub-group is built)") {
    for (const auto& o : run_ranks(temp_dir("cfg-grad-op"), "grad_op"))
      CHECK_THAT(o, Contains("ConfigError: config key 'trainer.strategy.sharding_strategy' is 'SHARD_GRAD_OP' on "
                             "rank 1 but 'FULL_SHARD' on rank 0"));
  }
  SECTION("default_root_dir (where every rank reads its checkpoints)") {
    for (const auto& o : run_ranks(temp_dir("cfg-root"), "root=other"))
      CHECK_THAT(o, Contains("ConfigError: config key 'trainer.default_root_dir'"));
  }
  SECTION("the model's hyper-parameters") {
    for (const auto& o : run_ranks(temp_dir("cfg-lr"), "lr=0.5"))
      CHECK_THAT(o, Contains("ConfigError: config key 'model.lr' is '0.5' on rank 1 but '0.25' on rank 0"));
  }
  SECTION("a node-local key (the model summary) may differ") {
    for (const auto& o : run_ranks(temp_dir("cfg-quiet"), "quiet")) CHECK(o == "ok");
  }
}

TEST_CASE("first_difference names the first differing key, nested, in lists, and keys on one side only",
          "[trainer][config_agreement]") {
  using volt::detail::first_difference;
  const YAML::Node rank0 =
      YAML::Load("{trainer: {max_steps: 4, strategy: {name: fsdp}}, model: {lr: 0.1, dims: [1, 2]}}");
  CHECK(first_difference(YAML::Clone(rank0), rank0, 3).empty());
  CHECK(first_difference(YAML::Load("{trainer: {max_steps: 4, strategy: {name: ddp}}, model: {lr: 0.1, dims: [1, 2]}}"),
                         rank0, 3) == "config key 'trainer.strategy.name' is 'ddp' on rank 3 but 'fsdp' on rank 0");
  CHECK(
      first_difference(YAML::Load("{trainer: {max_steps: 4, strategy: {name: fsdp}}, model: {lr: 0.1, dims: [1, 5]}}"),
                       rank0, 1) == "config key 'model.dims[1]' is '5' on rank 1 but '2' on rank 0");
  CHECK(first_difference(YAML::Load("{trainer: {max_steps: 4, strategy: {name: fsdp}}, model: {dims: [1, 2]}}"), rank0,
                         1) == "config key 'model.lr' is null on rank 1 but '0.1' on rank 0");
  CHECK(first_difference(
            YAML::Load("{trainer: {max_steps: 4, strategy: {name: fsdp}}, model: {lr: 0.1, dims: [1, 2], extra: 1}}"),
            rank0, 1) == "config key 'model.extra' is '1' on rank 1 but null on rank 0");
  CHECK_THAT(first_difference(YAML::Load("{trainer: {max_steps: 4, strategy: fsdp}, model: {lr: 0.1, dims: [1, 2]}}"),
                              rank0, 1),
             Contains("config key 'trainer.strategy' is 'fsdp' on rank 1 but {name: fsdp} on rank 0"));
  // The node-local keys are left out; the model's hyper-parameters are in.
  TrainerOptions a, b;
  b.enable_progress_bar = false;
  b.logger = false;
  const YAML::Node h = YAML::Load("{hidden: 8}");
  CHECK(first_difference(volt::detail::shared_config(b, h), volt::detail::shared_config(a, h), 1).empty());
  b.max_steps = 9;
  CHECK_THAT(first_difference(volt::detail::shared_config(b, h), volt::detail::shared_config(a, h), 1),
             Contains("'trainer.max_steps' is '9'"));
  CHECK_THAT(
      first_difference(volt::detail::shared_config(a, YAML::Load("{hidden: 9}")), volt::detail::shared_config(a, h), 1),
      Contains("'model.hidden' is '9' on rank 1 but '8'"));
}
