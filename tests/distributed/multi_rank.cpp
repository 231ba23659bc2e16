#include "distributed/multi_rank.h"

#include <catch2/catch.hpp>

#include "gan_model.h"
#include "stock_encoder_model.h"

namespace volt::testing {

int run_worker(const std::vector<std::string>& args, const std::string& dir, int timeout_s,
               const std::map<std::string, std::string>& env) {
  std::vector<std::string> argv{VOLT_TEST_WORKER};
  argv.insert(argv.end(), args.begin(), args.end());
  auto codes = run_processes({argv}, {env}, timeout_s, dir + "/worker");
  if (codes[0] != 0) WARN(read_text(dir + "/worker.0.log"));
  return codes[0];
}

WorkerResult train_single(const std::map<std::string, std::string>& overrides) {
  // The worker's own logic, in-process, through the same config keys.
  YAML::Node root(YAML::NodeType::Map);
  for (const auto& [k, v] : overrides) apply_override(root, k, v);
  // As the worker: the model is built under trainer.seed (7 without it).
  torch::manual_seed(root["trainer"] && root["trainer"]["seed"] ? root["trainer"]["seed"].as<int64_t>() : 7);
  BoringOptions bo;
  bo.blocks = root["blocks"] ? root["blocks"].as<int64_t>() : 2;
  bo.hidden = root["hidden"] ? root["hidden"].as<int64_t>() : 32;
  bo.lr = root["lr"] ? root["lr"].as<double>() : 0.1;
  bo.adam = root["adam"] ? root["adam"].as<bool>() : false;
  const bool gan = root["gan"] && root["gan"].as<bool>();
  const bool stock = root["stock"] && root["stock"].as<bool>();
  std::unique_ptr<LightningModule> owned;
  if (gan)
    owned = std::make_unique<GanModel>();
  else if (stock)
    owned = std::make_unique<StockEncoderModel>(StockEncoderOptions{
        .layers = bo.blocks, .lr = bo.lr, .deferred = root["deferred"] && root["deferred"].as<bool>()});
  else
    owned = std::make_unique<BoringModel>(bo);
  LightningModule& model = *owned;
  const int64_t samples = root["samples"] ? root["samples"].as<int64_t>() : 64;
  const int64_t bs = root["batch_size"] ? root["batch_size"].as<int64_t>() : 8;
  DataLoader loader(std::make_shared<RandomDataset>(samples), DataLoaderOptions{bs, true, false, 3});
  TrainerOptions t = options_from_yaml<TrainerOptions>(root["trainer"], "trainer");
  t.devices = 1;
  t.strategy = "auto";
  // The reference is CPU training unless a test asks otherwise: "auto" would take a GPU where one is.
  if (!root["trainer"] || !root["trainer"]["accelerator"]) t.accelerator = "cpu";
  WorkerResult r;
  struct InitState : Callback {
    std::map<std::string, torch::Tensor>* out;
    explicit InitState(std::map<std::string, torch::Tensor>* o) : out(o) {}
    std::string state_key() const override { return "InitState"; }
    void on_train_start(Trainer&, LightningModule& m) override {
      for (auto& kv : m.named_parameters())
        (*out)[kv.key()] = kv.value().detach().to(torch::kCPU, false, /*copy=*/true);
    }
  };
  Trainer trainer(t, {std::make_shared<InitState>(&r.init_state)});
  trainer.fit(model, loader);
  for (auto& kv : model.named_parameters())
    r.state[kv.key()] = kv.value().detach().to(torch::kCPU, false, /*copy=*/true);
  if (!gan && !stock) r.losses = static_cast<BoringModel&>(model).losses;
  r.global_step = trainer.global_step();
  return r;
}

double max_state_diff(const std::map<std::string, torch::Tensor>& a, const std::map<std::string, torch::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (const auto& [k, v] : a) {
    auto it = b.find(k);
    REQUIRE(it != b.end());
    REQUIRE(it->second.sizes() == v.sizes());
    m = std::max(m, (v.cpu().to(torch::kDouble) - it->second.cpu().to(torch::kDouble)).abs().max().item<double>());
  }
  return m;
}

}  // namespace volt::testing
