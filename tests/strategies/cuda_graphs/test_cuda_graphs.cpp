// trainer.cuda_graph. On the CPU the graphs are recorded by the rerun recorder (replay runs the
// recorded forward or backward again), so everything around them — static buffers, the output's
// autograd node, the generators and buffers put back after capture, the checks — is tested
// against eager training bit for bit. The [cuda] cases compare real CUDA graphs with eager
// training on the GPU machine (scripts/gpu.sh); without a GPU they say so and pass.
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "boring_model.h"
#include "distributed/multi_rank.h"
#include "gpu_visibility.h"
#include "volt/core/compat.h"
#include "volt/core/errors.h"
#include "volt/core/grad_hooks.h"
#include "volt/core/hooked_wrapper.h"
#include "volt/strategies/cuda_graphs/cuda_graphs.h"
#include "volt/strategies/fsdp/fsdp_strategy.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;
using volt::detail::CudaGraphs;

namespace {

/// Token pairs -> an embedding called twice, a dropout block, BatchNorm (running statistics), a
/// second block, and a plain head that stays eager.
struct Net : torch::nn::Module {
  Hooked<torch::nn::Embedding> emb{nullptr};
  std::shared_ptr<Block> block0, block1;
  Hooked<torch::nn::BatchNorm1d> bn{nullptr};
  torch::nn::Linear head{nullptr};
  explicit Net(double dropout = 0.3) {
    emb = register_module("emb", hooked(torch::nn::Embedding(50, 16)));
    block0 = register_module("block0", std::make_shared<Block>(16, 24, dropout));
    bn = register_module("bn", hooked(torch::nn::BatchNorm1d(24)));
    block1 = register_module("block1", std::make_shared<Block>(24, 24, dropout));
    head = register_module("head", torch::nn::Linear(24, 3));
  }
  torch::Tensor forward(const torch::Tensor& a, const torch::Tensor& b) {
    auto x = emb->forward(a) + emb->forward(b);
    x = block1->forward(bn->forward(block0->forward(x)));
    return head->forward(x);
  }
};

struct Run {
  std::vector<torch::Tensor> losses;
  std::vector<torch::Tensor> state;  // parameters, then buffers
};

/// `steps` AdamW steps on fixed random token batches; batch `short_at` has 5 rows instead of 8.
Run train(Net& net, CudaGraphs* graphs, int steps, int short_at = -1) {
  torch::manual_seed(11);
  auto data = at::detail::createCPUGenerator(5);
  torch::optim::AdamW opt(net.parameters(), torch::optim::AdamWOptions(0.01));
  net.train();
  Run r;
  for (int s = 0; s < steps; ++s) {
    const int64_t rows = s == short_at ? 5 : 8;
    auto a = torch::randint(50, {rows}, data, torch::kLong), b = torch::randint(50, {rows}, data, torch::kLong);
    auto target = torch::randn({rows, 3}, data);
    auto step = graphs ? graphs->step() : CudaGraphs::Step();
    auto loss = torch::mse_loss(net.forward(a, b), target);
    opt.zero_grad();
    loss.backward();
    opt.step();
    r.losses.push_back(loss.detach().clone());
  }
  for (auto& p : net.parameters()) r.state.push_back(p.detach().clone());
  for (auto& b : net.buffers()) r.state.push_back(b.detach().clone());
  return r;
}

std::shared_ptr<Net> fresh(double dropout = 0.3) {
  torch::manual_seed(3);
  return std::make_shared<Net>(dropout);
}

std::shared_ptr<CudaGraphs> rerun_graphs(Net& net) {
  auto g = std::make_shared<CudaGraphs>(volt::detail::make_rerun_recorder());
  g->apply(net);
  return g;
}

void require_bitwise(const Run& a, const Run& b) {
  REQUIRE(a.losses.size() == b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) CHECK(torch::equal(a.losses[i], b.losses[i]));
  REQUIRE(a.state.size() == b.state.size());
  for (size_t i = 0; i < a.state.size(); ++i) CHECK(torch::equal(a.state[i], b.state[i]));
}

}  // namespace

TEST_CASE("CUDA graphs (rerun recorder): graphed training equals eager training bit for bit", "[cuda_graph]") {
  auto eager_net = fresh();
  const Run eager = train(*eager_net, nullptr, 6);
  auto net = fresh();
  auto graphs = rerun_graphs(*net);
  CHECK(graphs->stats().modules == 4);  // emb, block0, bn, block1; the head is not a HookedModule
  const Run graphed = train(*net, graphs.get(), 6);
  require_bitwise(eager, graphed);
  // Two embedding calls a step: two graphs for it.
  CHECK(graphs->stats().captured == 5);
  CHECK(graphs->stats().replayed == 5 * 6);
  CHECK(graphs->stats().eager == 0);
  // The losses moved: the comparison is not between two untrained copies.
  CHECK(eager.losses.back().item<double>() != eager.losses.front().item<double>());
}

TEST_CASE("CUDA graphs (rerun recorder): a batch of another shape runs eagerly and training stays exact",
          "[cuda_graph]") {
  auto eager_net = fresh();
  const Run eager = train(*eager_net, nullptr, 5, /*short_at=*/3);
  auto net = fresh();
  auto graphs = rerun_graphs(*net);
  const Run graphed = train(*net, graphs.get(), 5, /*short_at=*/3);
  require_bitwise(eager, graphed);
  CHECK(graphs->stats().eager == 5);
  CHECK(graphs->stats().replayed == 5 * 4);
  const std::string s = graphs->summary();
  CHECK_THAT(s, Catch::Contains("[8] -> [5]"));
  CHECK_THAT(s, Catch::Contains("drop_last"));
}

TEST_CASE("CUDA graphs (rerun recorder): parameters still get gradients through autograd's accumulators",
          "[cuda_graph]") {
  // DDP launches its all-reduces from hooks on the accumulators (core/grad_hooks.h).
  auto net = fresh(0.0);
  auto graphs = rerun_graphs(*net);
  int64_t fired = 0;
  std::vector<std::shared_ptr<torch::autograd::Node>> keep;
  for (auto& p : net->parameters()) keep.push_back(volt::detail::add_grad_ready_hook(p, [&] { ++fired; }));
  train(*net, graphs.get(), 3);
  CHECK(fired == 3 * static_cast<int64_t>(net->parameters().size()));
  for (auto& p : net->parameters()) CHECK(p.grad().defined());
}

TEST_CASE("CUDA graphs: calls outside a training step, in eval mode or without grad run eagerly", "[cuda_graph]") {
  auto net = fresh();
  auto graphs = rerun_graphs(*net);
  auto a = torch::randint(50, {4}, torch::kLong);
  net->train();
  net->forward(a, a);  // no Step: not a training step
  {
    auto step = graphs->step();
    torch::NoGradGuard ng;
    net->forward(a, a);
  }
  {
    auto step = graphs->step();
    net->eval();
    net->forward(a, a);
  }
  CHECK(graphs->stats().captured == 0);
  CHECK(graphs->stats().replayed == 0);
  CHECK(graphs->stats().eager == 0);
}

namespace {
/// Reads another module's weight: its graph could not give that weight a gradient.
struct Borrower : HookedModule {
  torch::nn::Linear own{nullptr};
  torch::nn::Linear other;
  explicit Borrower(torch::nn::Linear o) : HookedModule("Borrower"), other(std::move(o)) {
    own = register_module("own", torch::nn::Linear(4, 4));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return intercepted({x}, [this](const TensorVec& in) { return own->forward(in[0]).matmul(other->weight); });
  }
};
struct BorrowNet : torch::nn::Module {
  torch::nn::Linear other{nullptr};
  std::shared_ptr<Borrower> b;
  BorrowNet() {
    other = register_module("other", torch::nn::Linear(4, 4));
    b = register_module("b", std::make_shared<Borrower>(other));
  }
};
}  // namespace

TEST_CASE("CUDA graphs: a module reading a parameter it does not own is refused at capture", "[cuda_graph]") {
  BorrowNet net;
  auto graphs = std::make_shared<CudaGraphs>(volt::detail::make_rerun_recorder());
  REQUIRE(graphs->apply(net) == 1);
  auto step = graphs->step();
  auto x = torch::randn({2, 4});
  try {
    net.b->forward(x);
    FAIL("no error");
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    CHECK_THAT(m, Catch::Contains("trainer.cuda_graph"));
    CHECK_THAT(m, Catch::Contains("module 'b' (Borrower)"));
    CHECK_THAT(m, Catch::Contains("neither one of its inputs nor one of its own parameters"));
  }
}

TEST_CASE("CUDA graphs: a parameter given new memory after capture is refused by name", "[cuda_graph]") {
  auto net = fresh();
  auto graphs = rerun_graphs(*net);
  train(*net, graphs.get(), 1);
  {
    torch::NoGradGuard ng;
    net->block1->linear->weight.set_data(net->block1->linear->weight.clone());
  }
  try {
    train(*net, graphs.get(), 1);
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("parameter 'linear.weight' of module 'block1'"));
  }
}

TEST_CASE("CUDA graphs: a backward after the same call's graph ran again is refused", "[cuda_graph]") {
  auto net = fresh(0.0);
  auto graphs = rerun_graphs(*net);
  net->train();
  auto a = torch::randint(50, {8}, torch::kLong);
  torch::Tensor first;
  {
    auto step = graphs->step();
    first = net->forward(a, a).sum();
  }
  {
    auto step = graphs->step();
    net->forward(a, a);  // replays every graph: `first`'s activations are gone
  }
  CHECK_THROWS_WITH(first.backward(), Catch::Contains("ran its captured forward again before the backward"));
}

TEST_CASE("CUDA graphs: the Trainer refuses what cannot be captured, naming the key", "[cuda_graph]") {
  TrainerOptions o = quiet_options(temp_dir("graph-refuse"));
  o.accelerator = "cpu";
  o.cuda_graph = true;
  o.max_steps = 2;
  BoringModel model;
  auto data = std::make_shared<RandomDataset>(16);
  DataLoader loader(data, {8, false});
  Trainer trainer(o);
  CHECK_THROWS_WITH(trainer.fit(model, loader),
                    Catch::Contains("config key 'trainer.cuda_graph'") && Catch::Contains("accelerator is cpu"));
  CHECK(model.losses.empty());  // refused before any step
  // The key goes through YAML like any other.
  TrainerOptions from_yaml = options_from_yaml<TrainerOptions>(YAML::Load("{cuda_graph: true}"), "trainer");
  CHECK(from_yaml.cuda_graph);
  // The strategies' own reasons (asked by the Trainer before set-up).
  FSDPStrategy fsdp(Precision("32-true", "cpu"), "cpu", 1, 1, FSDPOptions{});
  CHECK_THAT(fsdp.cuda_graph_unsupported_reason(), Catch::Contains("FSDP gathers"));
  SingleDeviceStrategy gpu(Precision("32-true", "cpu"), "cuda");
  CHECK(gpu.cuda_graph_unsupported_reason().empty());
  ModulePolicy ac;
  ac.module_types = {"Block"};
  gpu.set_activation_checkpointing(ac, "trainer.strategy.activation_checkpointing_policy");
  CHECK_THAT(gpu.cuda_graph_unsupported_reason(), Catch::Contains("activation_checkpointing_policy"));
}

namespace {
/// A single-device strategy that lets the Trainer graph a CPU run: the graphs are then recorded by
/// the rerun recorder, so fit's own path (set-up, a Step per training_step, teardown) is covered.
class GraphsOnCpu : public SingleDeviceStrategy {
 public:
  explicit GraphsOnCpu(CudaGraphs::Stats* stats)
      : SingleDeviceStrategy(Precision("32-true", "cpu"), "cpu"), stats_(stats) {}
  std::string cuda_graph_unsupported_reason() const override { return {}; }
  void teardown(LightningModule& module) override {
    if (cuda_graphs_) *stats_ = cuda_graphs_->stats();
    SingleDeviceStrategy::teardown(module);
  }

 private:
  CudaGraphs::Stats* stats_;
};

std::pair<std::vector<double>, std::vector<torch::Tensor>> fit_boring(bool graphs, int64_t accumulate,
                                                                      CudaGraphs::Stats* stats) {
  TrainerOptions o = quiet_options(temp_dir("graph-fit"));
  o.accelerator = "cpu";
  o.cuda_graph = graphs;
  o.max_epochs = 2;
  o.accumulate_grad_batches = accumulate;
  o.seed = 5;
  torch::manual_seed(5);
  BoringOptions bo;
  bo.dropout = 0.3;
  bo.adam = true;
  bo.lr = 0.01;
  BoringModel model(bo);
  auto data = std::make_shared<RandomDataset>(44);  // 5 batches of 8 and one of 4: the last runs eagerly
  DataLoader loader(data, {8, false});
  Trainer trainer(o, std::make_unique<GraphsOnCpu>(stats));
  trainer.fit(model, loader);
  std::vector<torch::Tensor> state;
  for (auto& p : model.parameters()) state.push_back(p.detach().clone());
  return {model.losses, state};
}
}  // namespace

TEST_CASE("CUDA graphs (rerun recorder): Trainer.fit with cuda_graph equals eager fit bit for bit", "[cuda_graph]") {
  for (int64_t accumulate : {1, 2}) {
    DYNAMIC_SECTION("accumulate_grad_batches " << accumulate) {
      CudaGraphs::Stats none, stats;
      auto eager = fit_boring(false, accumulate, &none);
      auto graphed = fit_boring(true, accumulate, &stats);
      CHECK(none.modules == 0);
      // Two Blocks; 2 epochs of 5 whole batches (replayed) and a short one (eager).
      CHECK(stats.modules == 2);
      CHECK(stats.captured == 2);
      CHECK(stats.replayed == 2 * 5 * 2);
      CHECK(stats.eager == 2 * 2);
      REQUIRE(eager.first.size() == 12);
      REQUIRE(graphed.first.size() == eager.first.size());
      for (size_t i = 0; i < eager.first.size(); ++i) CHECK(graphed.first[i] == eager.first[i]);
      REQUIRE(graphed.second.size() == eager.second.size());
      for (size_t i = 0; i < eager.second.size(); ++i) CHECK(torch::equal(graphed.second[i], eager.second[i]));
      CHECK(eager.first.back() != eager.first.front());
    }
  }
}

// ---- on the GPU --------------------------------------------------------------------------------

TEST_CASE("CUDA graphs on the GPU: fit with cuda_graph equals eager fit bit for bit", "[cuda][cuda_graph]") {
  if (no_cuda()) return;
  struct Case {
    std::string name, strategy;
    int devices;
  };
  // DDP holds its parameters' AccumulateGrad nodes from set-up: the case of [Note: the fit's stream
  // with CUDA graphs] (graph_recorder.cpp), at world size 1 (NCCL) as with 2 Gloo ranks.
  const std::vector<Case> cases = {
      {"single_device", "{name: single_device}", 1}, {"DDP, 1 rank", "ddp", 1}, {"DDP, 2 Gloo ranks", "ddp", 2}};
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.name) {
      const std::string dir = temp_dir("cuda-graph");
      auto kv = quiet_blocks_kv(dir);
      kv["adam"] = "true";
      kv["lr"] = "0.01";
      kv["dropout"] = "0.3";
      kv["batch_size"] = "8";
      kv["trainer.accelerator"] = "cuda";
      kv["trainer.strategy"] = c.strategy;
      kv["trainer.devices"] = std::to_string(c.devices);
      REQUIRE(run_worker(args_for(dir + "/eager.pt", kv), dir) == 0);
      kv["trainer.cuda_graph"] = "true";
      REQUIRE(run_worker(args_for(dir + "/graph.pt", kv), dir) == 0);
      auto eager = read_worker_output(dir + "/eager.pt"), graph = read_worker_output(dir + "/graph.pt");
      REQUIRE(eager.losses.size() == graph.losses.size());
      for (size_t i = 0; i < eager.losses.size(); ++i) CHECK(graph.losses[i] == eager.losses[i]);
      CHECK(max_state_diff(eager.state, graph.state) == 0.0);
    }
  }
}

TEST_CASE("CUDA graphs on the GPU: detect_anomaly is refused with cuda_graph, naming the key", "[cuda][cuda_graph]") {
  if (no_cuda()) return;
  TrainerOptions a;
  a.accelerator = "cuda";
  a.cuda_graph = true;
  a.detect_anomaly = true;
  CHECK_THROWS_WITH(a.validate(), Catch::Contains("detect_anomaly"));
  a.detect_anomaly = false;
  CHECK_NOTHROW(a.validate());
}

TEST_CASE("SideStreamScope: a pool stream is current while it lives, the previous one after", "[cuda][cuda_graph]") {
  const torch::Device cpu(torch::kCPU);
  { compat::SideStreamScope nothing(cpu); }  // the CPU has no streams: nothing to do, nothing thrown
  if (no_cuda()) return;
  const torch::Device gpu(torch::kCUDA, 0);
  c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  const c10::Stream before = impl.getStream(gpu);
  torch::Tensor a = torch::ones({1 << 20}, torch::TensorOptions().device(gpu));
  {
    compat::SideStreamScope scope(gpu);
    const c10::Stream side = impl.getStream(gpu);
    CHECK(side != before);
    CHECK(side != impl.getDefaultStream(gpu));
    a.mul_(3);  // queued on the side stream, after the ones above
  }
  CHECK(impl.getStream(gpu) == before);
  CHECK(a.sum().item<double>() == 3.0 * (1 << 20));  // ordered: the previous stream waited for the side one
}

TEST_CASE("CUDA graphs on the GPU: FSDP is refused before training with the reason", "[cuda][cuda_graph]") {
  if (no_cuda()) return;
  const std::string dir = temp_dir("cuda-graph-fsdp");
  auto kv = quiet_blocks_kv(dir);
  kv["trainer.accelerator"] = "cuda";
  kv["trainer.strategy"] = "{name: fsdp, auto_wrap_policy: {module_types: [Block]}}";
  kv["trainer.devices"] = "1";
  kv["trainer.cuda_graph"] = "true";
  CHECK(run_worker(args_for(dir + "/o.pt", kv), dir) != 0);
}
