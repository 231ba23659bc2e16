// FSDP's sync_module_states: with it, rank 0's parameters and buffers are broadcast before
// sharding; without it, ranks that were initialized differently are refused (a model mixed from
// several ranks' shards would train silently wrong). Each rank is this test binary running the
// hidden test case "[fsdp_sync_scenario]" under a simulated torchrun environment.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "distributed/multi_rank.h"

using namespace volt;
using namespace volt::testing;

namespace {

/// The full (gathered) model state as training starts, after the strategy set the module up.
class InitialState : public Callback {
 public:
  std::string state_key() const override { return "InitialState"; }
  void on_train_start(Trainer& t, LightningModule& m) override { state = t.strategy().model_state_dict(m); }
  std::map<std::string, torch::Tensor> state;
};

std::shared_ptr<BoringModel> model_for_seed(uint64_t seed) {
  torch::manual_seed(seed);
  BoringOptions o;
  o.blocks = 2;
  o.hidden = 33;  // flat sizes not divisible by the world size
  return std::make_shared<BoringModel>(o);
}

std::map<std::string, torch::Tensor> state_of(const std::shared_ptr<BoringModel>& m) {
  std::map<std::string, torch::Tensor> s;
  for (auto& kv : m->named_parameters()) s[kv.key()] = kv.value().detach().clone();
  return s;
}

struct RankResult {
  std::map<std::string, torch::Tensor> state;
  std::string error;
};

/// Runs 2 ranks; rank r builds its model from seed 7 + r * `seed_step`.
std::vector<RankResult> run_ranks(const std::string& dir, bool sync, int seed_step) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const int port = volt::detail::find_free_port();
  std::vector<std::vector<std::string>> argvs;
  std::vector<std::map<std::string, std::string>> envs;
  for (int r = 0; r < 2; ++r) {
    argvs.push_back({self, "[fsdp_sync_scenario]"});
    envs.push_back(torchrun_env(r, 2, port,
                                {{"VOLT_FSDP_SYNC_ROOT", dir},
                                 {"VOLT_FSDP_SYNC", sync ? "true" : "false"},
                                 {"VOLT_FSDP_SEED_STEP", std::to_string(seed_step)}}));
  }
  auto codes = run_processes(argvs, envs, 180, dir + "/rank");
  INFO(read_text(dir + "/rank.0.log") << read_text(dir + "/rank.1.log"));
  REQUIRE(codes == std::vector<int>{0, 0});
  std::vector<RankResult> out(2);
  for (int r = 0; r < 2; ++r) {
    const std::string base = dir + "/result." + std::to_string(r);
    out[r].error = read_text(base + ".error");
    std::ifstream in(base + ".pt", std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (bytes.empty()) continue;
    for (const auto& kv : torch::pickle_load(bytes).toGenericDict())
      out[r].state[kv.key().toStringRef()] = kv.value().toTensor();
  }
  return out;
}

}  // namespace

TEST_CASE("FSDP sync_module_states scenario rank (started by the tests below)", "[.][fsdp_sync_scenario]") {
  const char* root = std::getenv("VOLT_FSDP_SYNC_ROOT");
  if (!root) return;
  const int64_t rank = std::stoll(std::getenv("RANK"));
  TrainerOptions t = quiet_options(root);
  t.logger = false;
  t.devices = 2;
  t.max_steps = 1;
  t.strategy = "fsdp";
  t.strategy.fsdp.auto_wrap_policy.module_types = {"Block"};
  t.strategy.fsdp.sync_module_states = std::string(std::getenv("VOLT_FSDP_SYNC")) == "true";
  auto model = model_for_seed(7 + rank * std::stoll(std::getenv("VOLT_FSDP_SEED_STEP")));
  DataLoader loader(std::make_shared<RandomDataset>(16), DataLoaderOptions{4, false, false, 0});
  auto initial = std::make_shared<InitialState>();
  const std::string base = std::string(root) + "/result." + std::to_string(rank);
  try {
    Trainer trainer(t, {initial});
    trainer.fit(*model, loader);
    c10::Dict<std::string, at::Tensor> sd;
    for (auto& [k, v] : initial->state) sd.insert(k, v);
    auto bytes = torch::pickle_save(c10::impl::toGenericDict(sd));
    std::ofstream(base + ".pt", std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  } catch (const volt::Error& e) {
    std::ofstream(base + ".error") << e.what();
  }
}

TEST_CASE("FSDP sync_module_states: true starts every rank from rank 0's weights", "[fsdp][multirank][sync]") {
  auto rank0 = model_for_seed(7);
  auto rank1 = model_for_seed(8);
  REQUIRE(max_state_diff(state_of(rank0), state_of(rank1)) > 0.01);  // the ranks do start apart
  const auto ranks = run_ranks(temp_dir("fsdp-sync"), /*sync=*/true, /*seed_step=*/1);
  for (const auto& r : ranks) {
    INFO(r.error);
    REQUIRE(r.error.empty());
    CHECK(max_state_diff(r.state, state_of(rank0)) == 0);
  }
}

TEST_CASE("FSDP sync_module_states: false refuses ranks whose weights differ, and trusts equal ones",
          "[fsdp][multirank][sync]") {
  SECTION("different seeds per rank") {
    const auto ranks = run_ranks(temp_dir("fsdp-nosync"), /*sync=*/false, /*seed_step=*/1);
    for (const auto& r : ranks) {
      CHECK_THAT(r.error, Catch::Contains("'block0.linear.weight'"));
      CHECK_THAT(r.error, Catch::Contains("sync_module_states"));
      CHECK_THAT(r.error, Catch::Contains("differ"));
      CHECK(r.state.empty());
    }
  }
  SECTION("the same seed on every rank") {
    auto same = model_for_seed(7);
    for (const auto& r : run_ranks(temp_dir("fsdp-nosync-same"), /*sync=*/false, /*seed_step=*/0)) {
      INFO(r.error);
      REQUIRE(r.error.empty());
      CHECK(max_state_diff(r.state, state_of(same)) == 0);
    }
  }
}
