// Activation checkpointing: recomputation reproduces the forward exactly (dropout included), under
// single device, DDP and FSDP, for the test model and the demo Transformer.
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/cli_support.h"
#include "distributed/multi_rank.h"
#include "volt/core/compat.h"
#include "volt/core/errors.h"
#include "volt/core/grad_hooks.h"
#include "volt/core/hooked_module.h"
#include "volt/demos/transformer.h"
#include "volt/strategies/activation_checkpointing.h"
#include "volt/strategies/strategy_options.h"

using namespace volt;
using namespace volt::testing;

namespace {
std::map<std::string, std::string> base(const std::string& root) {
  auto kv = quiet_blocks_kv(root);
  kv["dropout"] = "0.3";
  return kv;
}
const std::string kBlocks = "{module_types: [Block]}";

void check_identical(const WorkerResult& a, const WorkerResult& b) {
  REQUIRE(a.losses.size() == b.losses.size());
  REQUIRE(!a.losses.empty());
  for (size_t i = 0; i < a.losses.size(); ++i) CHECK(a.losses[i] == Approx(b.losses[i]).epsilon(1e-6));
  CHECK(max_state_diff(a.state, b.state) < 1e-6);
}

/// Loss and every parameter gradient of one forward/backward of the demo Transformer.
std::pair<double, std::map<std::string, torch::Tensor>> demo_step(bool checkpointing, bool bf16, int64_t every_n = 1) {
  torch::manual_seed(3);
  demos::TransformerOptions o;
  o.vocab_size = 60;
  o.ninp = 16;
  o.nhead = 2;
  o.nhid = 24;
  o.nlayers = 2;
  o.dropout = 0.2;
  auto model = std::make_shared<demos::Transformer>(o);
  model->train();
  if (checkpointing) {
    ModulePolicy p;
    p.module_types = {"TransformerEncoderLayer", "TransformerDecoderLayer"};
    p.every_n_modules = every_n;
    CHECK(apply_activation_checkpointing(*model, p, "test") == static_cast<size_t>(4 / every_n));
  }
  torch::manual_seed(11);
  auto x = torch::randint(0, 60, {3, 7}), y = torch::randint(0, 60, {3, 7});
  torch::Tensor loss;
  {
    auto ac = compat::AutocastState::capture();
    if (bf16) compat::set_cpu_autocast(true, at::kBFloat16);
    loss = torch::nll_loss(model->forward(x, y).to(torch::kFloat), y.reshape(-1));
    ac.apply();
  }
  loss.backward();
  std::map<std::string, torch::Tensor> grads;
  for (const auto& kv : model->named_parameters()) {
    INFO(kv.key() << (checkpointing ? " with" : " without") << " checkpointing");
    REQUIRE(kv.value().grad().defined());
    grads[kv.key()] = kv.value().grad().clone();
  }
  return {loss.item<double>(), grads};
}

/// The largest difference between two runs' gradients of the same parameter.
double worst_difference(const std::map<std::string, torch::Tensor>& a, const std::map<std::string, torch::Tensor>& b) {
  double worst = 0;
  for (const auto& [k, g] : a) worst = std::max(worst, (g - b.at(k)).abs().max().item<double>());
  return worst;
}
}  // namespace

TEST_CASE("activation checkpointing: the demo Transformer's loss and gradients are unchanged", "[ac][demos]") {
  for (bool bf16 : {false, true}) {
    DYNAMIC_SECTION((bf16 ? "bf16 autocast" : "fp32")) {
      auto [plain_loss, plain] = demo_step(false, bf16);
      auto [ac_loss, ac] = demo_step(true, bf16);
      CHECK(ac_loss == plain_loss);
      const double worst = worst_difference(plain, ac);
      // Recomputation runs the same kernels on the same values; only the order in which the
      // encoder output's gradient sums over decoder layers may differ (rounding, not drift).
      CHECK(worst < (bf16 ? 5e-3 : 1e-6));
    }
  }
}

TEST_CASE("activation checkpointing of every 2nd layer: the demo Transformer's loss and gradients are unchanged",
          "[ac][demos]") {
  auto [plain_loss, plain] = demo_step(false, false);
  auto [ac_loss, ac] = demo_step(true, false, 2);
  CHECK(ac_loss == plain_loss);
  CHECK(worst_difference(plain, ac) < 1e-6);
}

TEST_CASE("activation checkpointing: every_n_modules picks the n-th, 2n-th, ... selected module", "[ac][config]") {
  BoringOptions o;
  o.blocks = 5;
  auto checkpointed = [&](int64_t n) {
    BoringModel m(o);
    ModulePolicy p;
    p.module_types = {"Block"};
    p.every_n_modules = n;
    const size_t installed = apply_activation_checkpointing(m, p, "trainer.strategy.activation_checkpointing_policy");
    std::vector<std::string> names;
    for (const auto& item : m.named_modules("", false)) {
      auto* h = dynamic_cast<HookedModule*>(item.value().get());
      if (h && h->has_interceptor(ActivationCheckpointing::kName)) names.push_back(item.key());
    }
    CHECK(names.size() == installed);
    return names;
  };
  CHECK(checkpointed(1).size() == 5);
  CHECK(checkpointed(2) == std::vector<std::string>{"block1", "block3"});
  CHECK(checkpointed(5) == std::vector<std::string>{"block4"});
  CHECK_THROWS_WITH(checkpointed(6), Catch::Contains("activation_checkpointing_policy.every_n_modules': 6, but the "
                                                     "policy selects 5 modules"));
  // C++ callers get the YAML's checks too.
  CHECK_THROWS_WITH(checkpointed(0), Catch::Contains("every_n_modules': must be >= 1, got 0"));
}

TEST_CASE("activation checkpointing: every_n_modules is checked where it is written", "[ac][config]") {
  auto strategy = [](const std::string& yaml) {
    auto o = volt::detail::YamlCodec<StrategyOptions>::decode(YAML::Load(yaml), "trainer.strategy");
    o.validate();
    return o;
  };
  CHECK(strategy("{name: fsdp, activation_checkpointing_policy: {module_types: [Block], every_n_modules: 3}}")
            .fsdp.activation_checkpointing_policy.every_n_modules == 3);
  CHECK(strategy("{name: ddp, activation_checkpointing_policy: {module_types: [Block], every_n_modules: 2}}")
            .activation_checkpointing_policy.every_n_modules == 2);
  CHECK_THROWS_WITH(strategy("{name: fsdp, activation_checkpointing_policy: {module_types: [Block], "
                             "every_n_modules: 0}}"),
                    Catch::Contains("activation_checkpointing_policy.every_n_modules': must be >= 1, got 0"));
  CHECK_THROWS_WITH(strategy("{name: ddp, activation_checkpointing_policy: {module_types: [Block], "
                             "every_n_modules: -2}}"),
                    Catch::Contains("every_n_modules': must be >= 1, got -2"));
  CHECK_THROWS_WITH(strategy("{name: fsdp, auto_wrap_policy: {module_types: [Block], every_n_modules: 2}}"),
                    Catch::Contains("auto_wrap_policy.every_n_modules': applies to activation_checkpointing_policy "
                                    "only"));
  CHECK_THROWS_AS(strategy("{name: fsdp, activation_checkpointing_policy: {module_types: [Block], "
                           "every_n_modules: two}}"),
                  ConfigError);
  // Alone it selects nothing: an error, not a policy that is silently empty.
  CHECK_THROWS_WITH(strategy("{name: fsdp, activation_checkpointing_policy: {every_n_modules: 2}}"),
                    Catch::Contains("every_n_modules': 2 of no module"));
  CHECK_THROWS_WITH(strategy("{name: single_device, activation_checkpointing_policy: {every_n_modules: 3}}"),
                    Catch::Contains("give module_types or min_num_params"));
}

TEST_CASE("activation checkpointing: inputs that need no gradient do not cut the parameters' gradients", "[ac]") {
  torch::manual_seed(0);
  BoringOptions o;
  o.blocks = 2;
  o.hidden = 8;
  BoringModel m(o);
  ModulePolicy p;
  p.module_types = {"Block"};
  REQUIRE(apply_activation_checkpointing(m, p, "test") == 2);
  auto x = torch::randn({4, 32});  // requires_grad = false
  REQUIRE_FALSE(x.requires_grad());
  auto loss = m.forward(x).square().mean();
  loss.backward();
  for (const auto& kv : m.named_parameters()) {
    INFO(kv.key());
    REQUIRE(kv.value().grad().defined());
    CHECK(kv.value().grad().abs().sum().item<double>() > 0);
  }
  CHECK(remove_activation_checkpointing(m) == 2);
}

TEST_CASE("activation checkpointing: a parameter's gradient arrives once a backward, however often it is used",
          "[ac]") {
  // A block called twice (checkpointed each time) whose weight is also used outside it. FSDP and
  // DDP take a parameter's AccumulateGrad as "its gradient is complete"; a nested backward per call
  // ran it once per call, and FSDP reduced and freed the unit before the later calls' gradients.
  struct Twice : torch::nn::Module {
    std::shared_ptr<Block> block;
    Twice() { block = register_module("block", std::make_shared<Block>(4, 4)); }
  };
  auto run = [](bool checkpointing) {
    torch::manual_seed(0);
    Twice m;
    if (checkpointing) {
      ModulePolicy p;
      p.module_types = {"Block"};
      REQUIRE(apply_activation_checkpointing(m, p, "test") == 1);
    }
    std::map<std::string, int> arrivals;
    std::vector<std::shared_ptr<torch::autograd::Node>> hooks;
    for (const auto& kv : m.named_parameters()) {
      const std::string name = kv.key();
      hooks.push_back(volt::detail::add_grad_ready_hook(kv.value(), [&arrivals, name] { ++arrivals[name]; }));
    }
    auto x = torch::randn({3, 4});
    auto loss = m.block->forward(m.block->forward(x)).square().sum() + x.matmul(m.block->linear->weight).sum();
    loss.backward();
    std::map<std::string, torch::Tensor> grads;
    for (const auto& kv : m.named_parameters()) grads[kv.key()] = kv.value().grad().clone();
    return std::make_pair(arrivals, grads);
  };
  const auto [plain_arrivals, plain] = run(false);
  const auto [ac_arrivals, ac] = run(true);
  REQUIRE(ac_arrivals.size() == 2);
  for (const auto& [name, n] : ac_arrivals) {
    INFO(name);
    CHECK(n == 1);
    CHECK(plain_arrivals.at(name) == 1);
  }
  CHECK(worst_difference(plain, ac) < 1e-6);

  // A tensor the checkpointed forward reads from elsewhere (not an input, not its parameter) still
  // gets its gradient; a double backward through the recomputation is refused, not first-order.
  struct Reader : HookedModule {
    torch::Tensor* outside;
    explicit Reader(torch::Tensor* w) : HookedModule("Reader"), outside(w) {}
    torch::Tensor forward(const torch::Tensor& x) {
      return intercepted({x}, [this](const TensorVec& in) { return torch::tanh(in[0].matmul(*outside)); });
    }
  };
  struct Holder : torch::nn::Module {
    std::shared_ptr<Reader> reader;
    explicit Holder(torch::Tensor* w) { reader = register_module("reader", std::make_shared<Reader>(w)); }
  };
  torch::manual_seed(1);
  torch::Tensor w = torch::randn({4, 4}).requires_grad_(true);
  const torch::Tensor x = torch::randn({3, 4});
  auto grad_of_w = [&](bool checkpointing) {
    w.mutable_grad() = torch::Tensor();
    Holder h(&w);
    if (checkpointing) {
      ModulePolicy p;
      p.module_types = {"Reader"};
      REQUIRE(apply_activation_checkpointing(h, p, "test") == 1);
    }
    h.reader->forward(x).square().sum().backward();
    REQUIRE(w.grad().defined());
    return w.grad().clone();
  };
  CHECK(torch::allclose(grad_of_w(false), grad_of_w(true)));
  Holder h(&w);
  ModulePolicy p;
  p.module_types = {"Reader"};
  REQUIRE(apply_activation_checkpointing(h, p, "test") == 1);
  const torch::Tensor xg = torch::randn({3, 4}).requires_grad_(true);
  const torch::Tensor y = h.reader->forward(xg).square().sum();
  CHECK_THROWS_WITH(torch::autograd::grad({y}, {xg}, {}, /*retain_graph=*/true, /*create_graph=*/true),
                    Catch::Contains("create_graph"));
}

TEST_CASE("activation checkpointing: a policy that selects nothing is a ConfigError", "[ac][config]") {
  BoringModel m;
  ModulePolicy p;
  p.module_types = {"TransformerEncoderLayer"};
  CHECK_THROWS_AS(apply_activation_checkpointing(m, p, "trainer.strategy.activation_checkpointing_policy"),
                  ConfigError);
  CHECK_THROWS_WITH(apply_activation_checkpointing(m, p, "trainer.strategy.activation_checkpointing_policy"),
                    Catch::Contains("activation_checkpointing_policy") && Catch::Contains("Block"));
  // Through the Trainer: the error comes at set-up, before any step.
  const std::string dir = temp_dir("ac-none");
  auto kv = base(dir);
  kv["trainer.strategy"] = "{name: single_device, activation_checkpointing_policy: {module_types: [Nope]}}";
  CHECK(run_worker(args_for(dir + "/o.pt", kv), dir) != 0);
  CHECK_THAT(read_text(dir + "/worker.0.log"), Catch::Contains("activation_checkpointing_policy"));
}

TEST_CASE("activation checkpointing with dropout matches the plain run under every strategy", "[ac][multirank]") {
  struct Case {
    std::string name, plain, with_ac;
    int devices;
    int accum;
    std::string clip;
  };
  const std::vector<Case> cases = {
      {"single device", "{name: single_device}",
       "{name: single_device, activation_checkpointing_policy: " + kBlocks + "}", 1, 1, ""},
      {"single device, every 2nd block", "{name: single_device}",
       "{name: single_device, activation_checkpointing_policy: {module_types: [Block], every_n_modules: 2}}", 1, 1, ""},
      {"DDP, 2 ranks, accumulation and clipping", "ddp",
       "{name: ddp, activation_checkpointing_policy: " + kBlocks + "}", 2, 2, "0.05"},
      {"FSDP FULL_SHARD, 2 ranks, accumulation and clipping",
       "{name: fsdp, sharding_strategy: FULL_SHARD, auto_wrap_policy: " + kBlocks + "}",
       "{name: fsdp, sharding_strategy: FULL_SHARD, auto_wrap_policy: " + kBlocks +
           ", activation_checkpointing_policy: " + kBlocks + "}",
       2, 2, "0.05"},
      {"FSDP FULL_SHARD, 2 ranks, every 2nd block",
       "{name: fsdp, sharding_strategy: FULL_SHARD, auto_wrap_policy: " + kBlocks + "}",
       "{name: fsdp, sharding_strategy: FULL_SHARD, auto_wrap_policy: " + kBlocks +
           ", activation_checkpointing_policy: {module_types: [Block], every_n_modules: 2}}",
       2, 1, ""},
  };
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.name) {
      const std::string dir = temp_dir("ac");
      auto kv = base(dir);
      kv["batch_size"] = "4";
      kv["trainer.devices"] = std::to_string(c.devices);
      kv["trainer.accumulate_grad_batches"] = std::to_string(c.accum);
      if (!c.clip.empty()) kv["trainer.gradient_clip_val"] = c.clip;
      kv["trainer.strategy"] = c.plain;
      REQUIRE(run_worker(args_for(dir + "/plain.pt", kv), dir) == 0);
      kv["trainer.strategy"] = c.with_ac;
      REQUIRE(run_worker(args_for(dir + "/ac.pt", kv), dir) == 0);
      check_identical(read_worker_output(dir + "/plain.pt"), read_worker_output(dir + "/ac.pt"));
    }
  }
}

TEST_CASE("activation checkpointing: the demo Transformer trains identically under DDP and FSDP (CLI)",
          "[ac][demos][multirank]") {
  if (!have_demo_data()) {
    WARN("WikiText-2 not found beside the repository: skipped");
    return;
  }
  const std::string layers = "{module_types: [TransformerEncoderLayer, TransformerDecoderLayer]}";
  for (const std::string name : {"ddp", "fsdp"}) {
    DYNAMIC_SECTION(name) {
      const std::string extra = name == "fsdp" ? ", sharding_strategy: FULL_SHARD, auto_wrap_policy: " + layers : "";
      const std::vector<std::string> common = {"--trainer.max_steps=6", "--trainer.devices=2", "--model.dropout=0.2"};
      auto with = [&](const std::string& strategy) {
        auto o = common;
        o.push_back("--trainer.strategy=" + strategy);
        return o;
      };
      auto plain = demo_train_losses(temp_dir("ac-cli"), with("{name: " + name + extra + "}"));
      auto ac = demo_train_losses(
          temp_dir("ac-cli"), with("{name: " + name + extra + ", activation_checkpointing_policy: " + layers + "}"));
      REQUIRE(plain.size() == 6);
      REQUIRE(ac.size() == plain.size());
      for (size_t i = 0; i < plain.size(); ++i) CHECK(ac[i] == Approx(plain[i]).epsilon(1e-6));
    }
  }
  // The demo's embedding runs twice a step (source and target): checkpointed as its own FSDP unit,
  // its second call's gradient was lost (a silently different run); inside the root unit, the
  // second recomputation read the root's freed parameters.
  for (const std::string wrap : {std::string(", auto_wrap_policy: {module_types: [Embedding]}"), std::string()}) {
    DYNAMIC_SECTION("fsdp, the embedding checkpointed" << (wrap.empty() ? " in the root unit" : " as its own unit")) {
      const std::vector<std::string> common = {"--trainer.max_steps=6", "--trainer.devices=2", "--model.dropout=0.2"};
      auto with = [&](const std::string& strategy) {
        auto o = common;
        o.push_back("--trainer.strategy=" + strategy);
        return o;
      };
      auto plain = demo_train_losses(temp_dir("ac-cli-emb"), with("{name: fsdp" + wrap + "}"));
      auto ac = demo_train_losses(
          temp_dir("ac-cli-emb"),
          with("{name: fsdp" + wrap + ", activation_checkpointing_policy: {module_types: [Embedding]}}"));
      REQUIRE(plain.size() == 6);
      REQUIRE(ac.size() == plain.size());
      for (size_t i = 0; i < plain.size(); ++i) CHECK(ac[i] == Approx(plain[i]).epsilon(1e-6));
    }
  }
}
