#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "distributed/multi_rank.h"
#include "volt/core/errors.h"
#include "volt/core/hooked_wrapper.h"
#include "volt/strategies/activation_checkpointing.h"
#include "volt/strategies/fsdp/fsdp_strategy.h"

using namespace volt;
using namespace volt::testing;

namespace {
std::map<std::string, std::string> base(const std::string& root) { return quiet_blocks_kv(root); }
std::string fsdp(const std::string& sharding, const std::string& extra = "") {
  return "{name: fsdp, sharding_strategy: " + sharding + ", auto_wrap_policy: {module_types: [Block]}" + extra + "}";
}
}  // namespace

TEST_CASE("FSDP: every sharding strategy matches single-process training and shards for real", "[fsdp][multirank]") {
  struct Case {
    std::string sharding;
    int world;
    std::string extra;
    int accum;
    std::string clip;
    bool adam;
  };
  std::vector<Case> cases = {
      {"FULL_SHARD", 2, "", 1, "", false},
      {"FULL_SHARD", 4, "", 2, "0.05", true},
      {"SHARD_GRAD_OP", 2, "", 2, "0.05", false},
      {"SHARD_GRAD_OP", 4, "", 1, "", true},
      {"NO_SHARD", 2, "", 1, "0.05", true},
      {"HYBRID_SHARD", 4, ", device_mesh: [2, 2]", 1, "0.05", true},
      {"_HYBRID_SHARD_ZERO2", 4, ", device_mesh: [2, 2]", 2, "", false},
      // Prefetch and gather-limit options change when gathers start, never the result.
      {"FULL_SHARD", 2, ", backward_prefetch: BACKWARD_POST, forward_prefetch: true", 1, "0.05", true},
      {"FULL_SHARD", 4, ", backward_prefetch: none, forward_prefetch: true, limit_all_gathers: false", 2, "", false},
  };
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.sharding << " world " << c.world << " accumulate " << c.accum << " clip '" << c.clip << "'"
                               << c.extra) {
      const std::string dir = temp_dir("fsdp");
      auto kv = base(dir);
      kv["trainer.accumulate_grad_batches"] = std::to_string(c.accum);
      if (!c.clip.empty()) kv["trainer.gradient_clip_val"] = c.clip;
      if (c.adam) {
        kv["adam"] = "true";
        kv["lr"] = "0.01";
      }
      auto single_kv = kv;
      single_kv["batch_size"] = std::to_string(4 * c.world);
      WorkerResult single = train_single(single_kv);
      kv["batch_size"] = "4";
      kv["trainer.strategy"] = fsdp(c.sharding, c.extra);
      kv["trainer.devices"] = std::to_string(c.world);
      REQUIRE(run_worker(args_for(dir + "/o.pt", kv), dir) == 0);
      WorkerResult r = read_worker_output(dir + "/o.pt");
      REQUIRE(r.losses.size() == single.losses.size());
      // The ranks' matmuls sum over 4 samples and the reduce adds the ranks, where the single process
      // sums 4N samples at once: fp32 rounding differs (OpenBLAS blocks the sums by size). Adam divides
      // by sqrt(v), which makes those differences grow a little more over the steps. A wrong
      // gradient or update is off by orders of magnitude more.
      for (size_t i = 0; i < r.losses.size(); ++i)
        CHECK(r.losses[i] == Approx(single.losses[i]).epsilon(c.adam ? 4e-5 : 1e-5));
      CHECK(max_state_diff(r.state, single.state) < (c.adam ? 4e-4 : 2e-5));

      // Sharding is real: 4 units (root = head, 3 Blocks); each rank holds padded/S elements.
      const int64_t S = c.sharding == "NO_SHARD" ? 1 : (c.sharding.find("HYBRID") != std::string::npos ? 2 : c.world);
      REQUIRE(r.numels.size() == 4);
      int64_t total = 0, shard_total = 0;
      for (size_t u = 0; u < r.numels.size(); ++u) {
        CHECK(r.padded[u] == (r.numels[u] + S - 1) / S * S);
        CHECK(r.shard_numels[u] * S == r.padded[u]);
        total += r.numels[u];
        shard_total += r.shard_numels[u];
      }
      // The optimizer (and so its state) sees exactly rank 0's share, padding excluded.
      CHECK(r.optimizer_numel <= shard_total);
      CHECK(r.optimizer_numel >= shard_total - static_cast<int64_t>(r.numels.size()) * (S - 1));
      CHECK(total == 32 * 33 + 33 + 2 * (33 * 33 + 33) + 33 * 2 + 2);
      // After the last step's forward: FULL_SHARD keeps the root and the last Block gathered (its
      // backward comes first; fp32, 4 bytes an element) and frees the others; SHARD_GRAD_OP keeps
      // them all.
      CHECK(r.root_unsharded_after_forward > 0);
      if (c.sharding == "FULL_SHARD" || c.sharding == "HYBRID_SHARD")
        CHECK(r.nonroot_unsharded_after_forward == r.padded.back() * 4);
      else
        CHECK(r.nonroot_unsharded_after_forward > 0);
    }
  }
}

TEST_CASE("FSDP with bf16-mixed stays close to single-process bf16-mixed", "[fsdp][multirank][precision]") {
  const std::string dir = temp_dir("fsdp-bf16");
  auto kv = base(dir);
  kv["trainer.precision"] = "bf16-mixed";
  auto single_kv = kv;
  single_kv["batch_size"] = "8";
  WorkerResult single = train_single(single_kv);
  kv["batch_size"] = "4";
  kv["trainer.strategy"] = fsdp("FULL_SHARD");
  kv["trainer.devices"] = "2";
  REQUIRE(run_worker(args_for(dir + "/o.pt", kv), dir) == 0);
  WorkerResult r = read_worker_output(dir + "/o.pt");
  for (size_t i = 0; i < r.losses.size(); ++i) CHECK(r.losses[i] == Approx(single.losses[i]).epsilon(3e-2));
  CHECK(max_state_diff(r.state, single.state) < 3e-2);
}

TEST_CASE("FSDP with fp16 gradient reduction (16-mixed's, divided before and after the sum) matches fp32",
          "[fsdp][multirank][precision]") {
  for (int world : {2, 4}) {
    DYNAMIC_SECTION("world " << world) {
      const std::string dir = temp_dir("fsdp-fp16-reduce");
      auto kv = base(dir);
      auto single_kv = kv;
      single_kv["batch_size"] = "8";
      WorkerResult single = train_single(single_kv);
      kv["batch_size"] = std::to_string(8 / world);
      kv["trainer.strategy"] = fsdp("FULL_SHARD", ", reduce_dtype: float16");
      kv["trainer.devices"] = std::to_string(world);
      REQUIRE(run_worker(args_for(dir + "/o.pt", kv), dir) == 0);
      WorkerResult r = read_worker_output(dir + "/o.pt");
      REQUIRE(r.losses.size() == single.losses.size());
      for (size_t i = 0; i < r.losses.size(); ++i) CHECK(r.losses[i] == Approx(single.losses[i]).epsilon(1e-3));
      CHECK(max_state_diff(r.state, single.state) < 1e-3);
    }
  }
}

TEST_CASE("FSDP matches DDP on the same run", "[fsdp][ddp][multirank]") {
  const std::string dir = temp_dir("fsdp-ddp");
  auto kv = base(dir);
  kv["batch_size"] = "4";
  kv["trainer.devices"] = "2";
  kv["trainer.strategy"] = "ddp";
  REQUIRE(run_worker(args_for(dir + "/ddp.pt", kv), dir) == 0);
  kv["trainer.strategy"] = fsdp("FULL_SHARD");
  REQUIRE(run_worker(args_for(dir + "/fsdp.pt", kv), dir) == 0);
  CHECK(max_state_diff(read_worker_output(dir + "/ddp.pt").state, read_worker_output(dir + "/fsdp.pt").state) < 2e-5);
}

namespace {
FSDPStrategy make_fsdp(FSDPOptions o) { return FSDPStrategy(Precision("32-true", "cpu"), "cpu", 1, 1, std::move(o)); }
/// FSDP at world 1 with modules of `unit_types` as units, set up on `m` (tear it down at the end).
std::unique_ptr<FSDPStrategy> fsdp_on(BoringModel& m, std::vector<std::string> unit_types = {"Block"}) {
  FSDPOptions o;
  o.auto_wrap_policy.module_types = std::move(unit_types);
  auto s = std::make_unique<FSDPStrategy>(Precision("32-true", "cpu"), "cpu", 1, 1, std::move(o));
  s->setup_environment();
  s->setup_module(m);
  return s;
}
size_t num_units(FSDPStrategy& s, BoringModel& m) {
  s.setup_environment();
  s.setup_module(m);
  size_t n = s.units().size();
  s.teardown(m);
  return n;
}
}  // namespace

TEST_CASE("FSDP wrap policies pick the expected units", "[fsdp][policy]") {
  BoringOptions bo;
  bo.blocks = 3;
  SECTION("type set") {
    BoringModel m(bo);
    FSDPOptions o;
    o.auto_wrap_policy.module_types = {"Block"};
    auto s = make_fsdp(o);
    CHECK(num_units(s, m) == 4);
  }
  SECTION("size based") {
    BoringModel m(bo);
    FSDPOptions o;
    o.auto_wrap_policy.min_num_params = 32 * 32 + 32;  // each Block has exactly this many
    auto s = make_fsdp(o);
    CHECK(num_units(s, m) == 4);
  }
  SECTION("predicate (manual wrapping of one module)") {
    BoringModel m(bo);
    FSDPOptions o;
    o.auto_wrap_policy.predicate = [](const torch::nn::Module&, const std::string& name) { return name == "block1"; };
    auto s = make_fsdp(o);
    s.setup_environment();
    s.setup_module(m);
    auto units = s.units();
    REQUIRE(units.size() == 2);
    CHECK(units[1].name == "block1");
    CHECK(units[1].numel == 32 * 32 + 32);
    // After teardown the module stays sharded; unshard_module makes it whole and usable alone.
    s.teardown(m);
    for (auto& p : m.parameters()) CHECK(p.numel() == 0);
    s.unshard_module(m);
    CHECK(m.forward(torch::ones({2, 32})).sizes() == std::vector<int64_t>{2, 2});
  }
  SECTION("a policy that selects nothing is an error naming the wrappable types") {
    BoringModel m(bo);
    FSDPOptions o;
    o.auto_wrap_policy.module_types = {"TransformerEncoderLayer"};
    auto s = make_fsdp(o);
    s.setup_environment();
    CHECK_THROWS_WITH(s.setup_module(m), Catch::Contains("selects no module") && Catch::Contains("Block"));
  }
  SECTION("a policy that selects a plain (non-hooked) module is an error") {
    BoringModel m(bo);
    FSDPOptions o;
    o.auto_wrap_policy.module_types = {"torch::nn::Linear"};
    auto s = make_fsdp(o);
    s.setup_environment();
    CHECK_THROWS_WITH(s.setup_module(m), Catch::Contains("HookedModule"));
  }
}

TEST_CASE("FSDP bad input fails before training", "[fsdp][config]") {
  FSDPOptions o;
  o.sharding_strategy = "QUARTER_SHARD";
  CHECK_THROWS_WITH(FSDPStrategy(Precision("32-true", "cpu"), "cpu", 2, 1, o), Catch::Contains("sharding_strategy"));
  FSDPOptions h;
  h.sharding_strategy = "HYBRID_SHARD";
  h.device_mesh = {3, 2};
  CHECK_THROWS_WITH(FSDPStrategy(Precision("32-true", "cpu"), "cpu", 4, 1, h), Catch::Contains("device_mesh"));
  h.device_mesh = {3, 6148914691236517206};  // 2^64 + 2 ranks, 2 in int64: it passed for a world of 2
  CHECK_THROWS_WITH(FSDPStrategy(Precision("32-true", "cpu"), "cpu", 2, 1, h),
                    Catch::Contains("device_mesh") && Catch::Contains("at least 2^63 ranks"));
  // NCCL on the CPU: refused at construction, before a rank is launched or a store is made.
  FSDPOptions n;
  n.process_group_backend = "nccl";
  CHECK_THROWS_WITH(FSDPStrategy(Precision("32-true", "cpu"), "cpu", 2, 1, n),
                    Catch::Contains("config key 'trainer.strategy.process_group_backend'") &&
                        Catch::Contains("accelerator is 'cpu'"));
}

namespace {
/// Trains `single` on one device and `sharded` under FSDP at world 1 (Blocks as units), with the
/// same options and data, and checks that their parameters end up the same.
void fit_single_and_fsdp(BoringModel& single, BoringModel& sharded, TrainerOptions o,
                         std::vector<std::string> unit_types = {"Block"}) {
  DataLoader la(std::make_shared<RandomDataset>(32), DataLoaderOptions{8, false, false, 0});
  DataLoader lb(std::make_shared<RandomDataset>(32), DataLoaderOptions{8, false, false, 0});
  Trainer ta(o);
  ta.fit(single, la);
  o.strategy = "fsdp";
  o.strategy.fsdp.auto_wrap_policy.module_types = std::move(unit_types);
  Trainer tb(o);
  tb.fit(sharded, lb);
  // After fit the module stays sharded (nothing gathered) until asked.
  for (auto& p : sharded.parameters()) CHECK(p.numel() == 0);
  tb.strategy().unshard_module(sharded);
  auto pa = single.named_parameters(), pb = sharded.named_parameters();
  REQUIRE(pa.size() == pb.size());
  for (auto& kv : pa) CHECK(torch::allclose(kv.value(), pb[kv.key()], 1e-6, 1e-6));
}

/// Two `M`s from the same seed: one trained on one device, one under FSDP at world 1.
template <class M>
void check_like_single_device(const BoringOptions& bo, uint64_t seed, const std::string& dir,
                              std::vector<std::string> unit_types = {"Block"}) {
  torch::manual_seed(seed);
  M a(bo);
  torch::manual_seed(seed);
  M b(bo);
  fit_single_and_fsdp(a, b, quiet_options(temp_dir(dir)), std::move(unit_types));
}
}  // namespace

TEST_CASE("FSDP on one process frees unit storage after forward and trains like single device", "[fsdp]") {
  BoringOptions bo;
  bo.blocks = 2;
  check_like_single_device<BoringModel>(bo, 3, "fsdp1");
}

namespace {
/// BoringModel that calls `probe` from the backward of block0's output: by then every later unit's
/// backward has run.
class ProbedModel : public BoringModel {
 public:
  using BoringModel::BoringModel;
  std::function<void()> probe;
  torch::Tensor training_step(const Batch& batch, int64_t) override {
    torch::Tensor x = blocks[0]->forward(batch[0]);
    x.register_hook([this](const torch::Tensor&) {
      if (probe) probe();
    });
    for (size_t i = 1; i < blocks.size(); ++i) x = blocks[i]->forward(x);
    auto out = head->forward(x);
    return torch::mse_loss(out, torch::ones_like(out));
  }
};
}  // namespace

TEST_CASE("FSDP on one process frees units during a gradient-accumulation micro-step", "[fsdp]") {
  BoringOptions bo;
  bo.blocks = 3;
  ProbedModel m(bo);
  auto s = fsdp_on(m);
  REQUIRE(s->units().size() == 4);
  std::vector<size_t> during;  // unsharded bytes of units 2.. while block0's backward runs
  m.probe = [&] {
    auto u = s->units();
    for (size_t i = 2; i < u.size(); ++i) during.push_back(u[i].unsharded_bytes);
  };
  Batch batch{torch::randn({4, 32})};
  for (int step = 0; step < 2; ++step) {
    during.clear();
    torch::Tensor loss = s->training_step(m, batch, step);
    s->backward(m, loss, /*sync_gradients=*/false);
    REQUIRE(during.size() == 2);
    for (size_t b : during) CHECK(b == 0);
    auto u = s->units();
    for (size_t i = 1; i < u.size(); ++i) CHECK(u[i].unsharded_bytes == 0);
    // The full gradients are kept (not reduced) between micro-steps.
    for (auto& p : m.parameters()) CHECK(p.grad().defined());
  }
  s->teardown(m);
}

namespace {
/// BoringModel (3 blocks) whose forward calls block1 twice in a row, calling `probe` between the
/// two calls; `after_forward` runs once the loss is computed.
class TwiceModel : public BoringModel {
 public:
  using BoringModel::BoringModel;
  std::function<void()> probe, after_forward;
  torch::Tensor training_step(const Batch& batch, int64_t) override {
    torch::Tensor x = blocks[1]->forward(blocks[0]->forward(batch[0]));
    if (probe) probe();
    x = blocks[2]->forward(blocks[1]->forward(x));
    auto out = head->forward(x);
    auto loss = torch::mse_loss(out, torch::ones_like(out));
    if (after_forward) after_forward();
    return loss;
  }
};
}  // namespace

TEST_CASE("FSDP keeps a unit gathered when it is the next to gather: called again at once, or last in forward",
          "[fsdp]") {
  BoringOptions bo;
  bo.blocks = 3;
  TwiceModel m(bo);
  auto s = fsdp_on(m);
  REQUIRE(s->units().size() == 4);
  std::vector<size_t> between, after;  // unsharded bytes of block1, and of blocks 0..2
  m.probe = [&] { between.push_back(s->units()[2].unsharded_bytes); };
  m.after_forward = [&] {
    after.clear();
    for (size_t i = 1; i < 4; ++i) after.push_back(s->units()[i].unsharded_bytes);
  };
  Batch batch{torch::randn({4, 32})};
  const size_t block_bytes = (32 * 32 + 32) * 4;
  for (int step = 0; step < 3; ++step) {
    torch::Tensor loss = s->training_step(m, batch, step);
    if (step == 0) {
      // No previous order yet: every unit is freed after its forward.
      CHECK(between.back() == 0);
      CHECK(after == std::vector<size_t>{0, 0, 0});
    } else {
      // block1 runs again at once; block2's backward comes first: both stay, block0 is freed.
      CHECK(between.back() == block_bytes);
      CHECK(after == std::vector<size_t>{0, 0, block_bytes});
    }
    s->backward(m, loss, /*sync_gradients=*/true);
    for (size_t i = 1; i < 4; ++i) CHECK(s->units()[i].unsharded_bytes == 0);
  }
  // A forward whose loss never goes backward leaves block2 gathered; the next step frees it first.
  s->training_step(m, batch, 3);
  CHECK(s->units()[3].unsharded_bytes == block_bytes);
  m.probe = [&] { CHECK(s->units()[3].unsharded_bytes == 0); };
  s->backward(m, s->training_step(m, batch, 4), true);
  s->teardown(m);

  // The same model trains as on a single device.
  check_like_single_device<TwiceModel>(bo, 5, "fsdp-twice");
}

namespace {
/// BoringModel behind an embedding (indices made from the inputs), a volt::hooked stock Embedding
/// that FSDP can make a unit. `probe` runs in backward right after the embedding output's FSDP hook.
class EmbeddingModel : public BoringModel {
 public:
  explicit EmbeddingModel(BoringOptions o) : BoringModel(o) {
    embedding = register_module("embedding", volt::hooked(torch::nn::Embedding(50, o.dim)));
  }
  std::function<void()> probe;
  torch::Tensor training_step(const Batch& batch, int64_t) override {
    torch::Tensor ids = (batch[0].abs() * 10).to(torch::kLong).clamp_max(49);
    torch::Tensor e = embedding->forward(ids);
    if (probe) e.register_hook([this](const torch::Tensor&) { probe(); });
    auto out = forward(e.mean(1) + batch[0]);
    return torch::mse_loss(out, torch::ones_like(out));
  }
  volt::Hooked<torch::nn::Embedding> embedding{nullptr};
};
}  // namespace

TEST_CASE("FSDP does not gather an embedding unit for its backward, which reads no weights", "[fsdp]") {
  BoringOptions bo;
  bo.blocks = 2;
  for (bool checkpointed : {false, true}) {
    DYNAMIC_SECTION((checkpointed ? "activation-checkpointed" : "plain")) {
      torch::manual_seed(7);
      EmbeddingModel m(bo);
      auto s = fsdp_on(m, {"Embedding", "Block"});
      if (checkpointed) {
        ModulePolicy ac;
        ac.module_types = {"Embedding"};
        REQUIRE(apply_activation_checkpointing(m, ac, "test") == 1);
      }
      REQUIRE(s->units().size() == 4);
      REQUIRE(s->units()[3].name == "embedding");  // units follow registration order
      std::vector<size_t> seen;
      m.probe = [&] { seen.push_back(s->units()[3].unsharded_bytes); };
      Batch batch{torch::randn({4, 32})};
      for (int step = 0; step < 2; ++step) s->backward(m, s->training_step(m, batch, step), true);
      REQUIRE(seen.size() == 2);
      // Checkpointed, the recomputed forward reads the weight: gathered (50 x 32 fp32).
      for (size_t b : seen) CHECK(b == (checkpointed ? 50 * 32 * 4 : 0));
      s->teardown(m);
    }
  }
  // Trained as on one device, the embedding's gradient included.
  check_like_single_device<EmbeddingModel>(bo, 8, "fsdp-embedding", {"Embedding", "Block"});
}

TEST_CASE("FSDP on one process trains a model with frozen parameters like single device", "[fsdp]") {
  BoringOptions bo;
  bo.blocks = 3;
  auto freeze = [](BoringModel& m) {
    m.blocks[0]->linear->bias.requires_grad_(false);
    m.blocks[1]->linear->weight.requires_grad_(false);
  };
  torch::manual_seed(5);
  BoringModel a(bo);
  torch::manual_seed(5);
  BoringModel b(bo);
  freeze(a);
  freeze(b);
  const torch::Tensor bias0 = a.blocks[0]->linear->bias.detach().clone();
  auto o = quiet_options(temp_dir("fsdp-frozen"));
  o.accumulate_grad_batches = 2;
  fit_single_and_fsdp(a, b, o);
  CHECK(torch::equal(b.blocks[0]->linear->bias, bias0));
}

TEST_CASE(
    "after fit FSDP keeps the module sharded: the same Trainer validates on the shards, "
    "unshard_module gives it back, another Trainer refuses it until then",
    "[fsdp][teardown]") {
  BoringOptions bo;
  torch::manual_seed(8);
  BoringModel single(bo);
  torch::manual_seed(8);
  BoringModel sharded(bo);
  DataLoader la(std::make_shared<RandomDataset>(32), DataLoaderOptions{8, false, false, 0});
  DataLoader lb(std::make_shared<RandomDataset>(32), DataLoaderOptions{8, false, false, 0});
  DataLoader val(std::make_shared<RandomDataset>(16, 32, 5), DataLoaderOptions{8, false, false, 0});
  auto o = quiet_options(temp_dir("fsdp-after-fit"));
  Trainer ta(o);
  ta.fit(single, la);
  const double expected = ta.validate(single, val).at("val_loss");
  o.strategy = "fsdp";
  o.strategy.fsdp.auto_wrap_policy.module_types = {"Block"};
  Trainer tb(o);
  tb.fit(sharded, lb);
  for (auto& p : sharded.parameters()) CHECK(p.numel() == 0);  // nothing at full size
  CHECK(std::abs(tb.validate(sharded, val).at("val_loss") - expected) < 1e-6);
  // Streamed out without unsharding the module.
  auto state = tb.strategy().model_state_dict(sharded);
  for (auto& kv : single.named_parameters()) CHECK(torch::allclose(state.at(kv.key()), kv.value(), 1e-6, 1e-6));
  // A second Trainer cannot take a module another one keeps sharded: it says what to do.
  Trainer tc(quiet_options(temp_dir("fsdp-after-fit-2")));
  CHECK_THROWS_WITH(tc.fit(sharded, la), Catch::Contains("unshard_module"));
  tb.strategy().unshard_module(sharded);
  for (auto& kv : single.named_parameters())
    CHECK(torch::allclose(sharded.named_parameters()[kv.key()], kv.value(), 1e-6, 1e-6));
  tc.fit(sharded, la);  // an ordinary module again
}

namespace {
/// BoringModel with its loss in fp32, as under "bf16-true" (this LibTorch's CPU mse_loss has no bf16 kernel).
struct Fp32LossModel : BoringModel {
  using BoringModel::BoringModel;
  torch::Tensor training_step(const Batch& batch, int64_t) override {
    auto out = forward(batch[0]).to(torch::kFloat);
    auto loss = torch::mse_loss(out, torch::ones_like(out));
    log("train_loss", loss);
    return loss;
  }
};
}  // namespace

TEST_CASE("FSDP under bf16-true keeps bf16 shards (2 bytes a parameter) and trains like one device",
          "[fsdp][precision]") {
  BoringOptions bo;
  torch::manual_seed(9);
  Fp32LossModel single(bo);
  torch::manual_seed(9);
  Fp32LossModel sharded(bo);
  DataLoader la(std::make_shared<RandomDataset>(32), DataLoaderOptions{8, false, false, 0});
  DataLoader lb(std::make_shared<RandomDataset>(32), DataLoaderOptions{8, false, false, 0});
  auto o = quiet_options(temp_dir("fsdp-bf16-true"));
  o.precision = "bf16-true";
  Trainer ta(o);
  ta.fit(single, la);
  o.strategy = "fsdp";
  o.strategy.fsdp.auto_wrap_policy.module_types = {"Block"};
  Trainer tb(o);
  tb.fit(sharded, lb);
  auto* fsdp = dynamic_cast<FSDPStrategy*>(&tb.strategy());
  REQUIRE(fsdp != nullptr);
  for (const auto& u : fsdp->units()) CHECK(u.shard_bytes == static_cast<size_t>(u.shard_numel) * 2);
  auto state = tb.strategy().model_state_dict(sharded);
  for (auto& kv : single.named_parameters()) {
    INFO(kv.key());
    CHECK(state.at(kv.key()).scalar_type() == torch::kBFloat16);
    CHECK(torch::equal(state.at(kv.key()), kv.value().cpu()));
  }
}

TEST_CASE("FSDP: a weight shared across units is refused with a message that says what to do", "[fsdp][errors]") {
  // Block 1 reads block 0's weight (assigned to its member, as a user ties weights in C++): under
  // FULL_SHARD it is freed while block 1 runs.
  torch::manual_seed(3);
  BoringModel m;
  m.blocks[1]->as<Block>()->linear->weight = m.blocks[0]->as<Block>()->linear->weight;
  DataLoader la(std::make_shared<RandomDataset>(32), DataLoaderOptions{8, false, false, 0});
  auto o = quiet_options(temp_dir("fsdp-tied"));
  o.strategy = "fsdp";
  o.strategy.fsdp.auto_wrap_policy.module_types = {"Block"};
  Trainer t(o);
  CHECK_THROWS_WITH(t.fit(m, la), Catch::Contains("unit 'block1'") && Catch::Contains("shared across units") &&
                                      Catch::Contains("auto_wrap_policy"));
}
