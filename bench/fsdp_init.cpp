// FSDP memory with deferred initialization on the CPU, on a model made only of stock torch::nn layers
// at ~1 B parameters: hooked(Embedding(8192, 2048)) -> 20 x hooked(TransformerEncoderLayer(d 2048,
// nhead 16, ff 8192, dropout 0)) -> LayerNorm (root) -> hooked(Linear(2048, 8192)), next-token
// cross-entropy on random token ids (fixed seed), fp32, batch 1 x block 16 per rank, 2 steps.
// FULL_SHARD at world N = 2 and 4, deferred "yes" (each unit built in configure_model() and handed to
// LightningModule::wrap(), which shards it at once) and "no" (the whole model built in the
// constructor on every rank, sharded by auto_wrap_policy at set-up), plus an N = 1 single-device
// baseline. For each configuration, side by side in one invocation (max over ranks):
//   - Ψ, the full model 4Ψ (fp32), the largest unit, and the goal for set-up: 1.1 x (4Ψ/N + largest unit),
//   - per-rank peak RSS growth during set-up: VmHWM at on_train_start minus the RSS just before the
//     model is built (before the constructor), and its ratio to the goal,
//   - per-rank peak RSS growth over the whole fit (set-up and steps, before teardown),
//   - the cost model for training: AdamW 16Ψ/N (params + grads + two moments, fp32), or 8Ψ/N for SGD
//     without momentum (params + grads),
//   - median step time (all steps; there is no warm-up step).
// Optimizers: FSDP rows use torch::optim::AdamW (16Ψ/N); the N = 1 row uses SGD without momentum
// (8Ψ: 16Ψ = 16.6 GB would not leave room on a 24 GB machine), see --optimizer / --baseline-optimizer.
// Memory of one configuration at the defaults, all ranks together (measured): N = 1 ~ 8.5 GB; N = 2 ~
// 2 x 9.8 GB; N = 4 ~ 22.5 GB machine-wide at its peak (per rank 16Ψ/N = 4.2 GB + ~1.6 GB), which
// is above a 20 GB budget but fits a 24 GB machine; --optimizer sgd (8Ψ/N) or --worlds 1,2 if tighter.
// The N = 1 row is run once, with the first --deferred value (wrap() is a no-op on one device, and
// configure_model() builds the model only if the constructor has not).
//
// Usage: bench_fsdp_init [--layers 20] [--d 2048] [--nhead 16] [--ff 8192] [--vocab 8192] [--batch 1]
//                        [--block 16] [--steps 2] [--lr 1e-4] [--worlds 1,2,4] [--deferred yes,no]
//                        [--optimizer adamw|sgd] [--baseline-optimizer sgd|adamw] [--results FILE]
// Small check (< 1 minute): --layers 2 --d 256 --ff 1024 --vocab 512 --steps 2.
// The default (1 B) run takes about 8.5 minutes on 2 cores (N = 1: 25 s; N = 2: ~100 s per row; N = 4:
// ~145 s per row, steps of 35-60 s); --results FILE keeps the raw results and resumes.
//
// How it runs (as bench_fsdp): the process you start runs nothing itself; for every (world, deferred)
// it starts this binary again with "--run WORLD DEFERRED --out FILE"; that child's Trainer with
// devices = WORLD self-launches the other ranks. Rank 0 appends one result line to FILE; the parent
// prints one markdown table at the end. glibc's mmap threshold is pinned so RSS follows live tensors.
#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench_util.h"
#include "volt/core/hooked_wrapper.h"
#include "volt/distributed/launcher.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  int64_t layers = 20, d = 2048, nhead = 16, ff = 8192, vocab = 8192;
  int64_t batch = 1, block = 16, steps = 2;
  double lr = 1e-4;
  std::vector<int64_t> worlds = {1, 2, 4};
  std::vector<std::string> deferred = {"yes", "no"};
  std::string optimizer = "adamw";         // FSDP rows (N > 1)
  std::string baseline_optimizer = "sgd";  // the N = 1 row
  int64_t run_world = 0;                   // internal: one configuration (the child's side)
  std::string run_deferred, out, results;
};

std::string yes_no(const std::string& s) {
  if (s != "yes" && s != "no") throw std::invalid_argument("--deferred takes yes/no, not '" + s + "'");
  return s;
}
std::string optimizer_name(const std::string& s) {
  if (s != "adamw" && s != "sgd") throw std::invalid_argument("optimizer must be adamw or sgd, not '" + s + "'");
  return s;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument("missing value after " + k);
      return argv[++i];
    };
    if (k == "--layers")
      a.layers = std::stoll(value());
    else if (k == "--d")
      a.d = std::stoll(value());
    else if (k == "--nhead")
      a.nhead = std::stoll(value());
    else if (k == "--ff")
      a.ff = std::stoll(value());
    else if (k == "--vocab")
      a.vocab = std::stoll(value());
    else if (k == "--batch")
      a.batch = std::stoll(value());
    else if (k == "--block")
      a.block = std::stoll(value());
    else if (k == "--steps")
      a.steps = std::stoll(value());
    else if (k == "--lr")
      a.lr = std::stod(value());
    else if (k == "--optimizer")
      a.optimizer = optimizer_name(value());
    else if (k == "--baseline-optimizer")
      a.baseline_optimizer = optimizer_name(value());
    else if (k == "--worlds") {
      a.worlds.clear();
      for (const auto& w : bench::split_list(value())) a.worlds.push_back(std::stoll(w));
    } else if (k == "--deferred") {
      a.deferred.clear();
      for (const auto& s : bench::split_list(value())) a.deferred.push_back(yes_no(s));
    } else if (k == "--run") {
      a.run_world = std::stoll(value());
      a.run_deferred = yes_no(value());
    } else if (k == "--out")
      a.out = value();
    else if (k == "--results")
      a.results = value();
    else
      throw std::invalid_argument("unknown argument " + k);
  }
  if (a.layers < 1 || a.d < 1 || a.d % a.nhead != 0 || a.ff < 1 || a.vocab < 2 || a.batch < 1 || a.block < 1 ||
      a.steps < 1 || a.deferred.empty())
    throw std::invalid_argument("bad sizes (d must divide by nhead)");
  return a;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Random token ids (size x (block + 1)) from a fixed seed: inputs [0, block), targets [1, block].
class RandomTokens : public Dataset {
 public:
  RandomTokens(int64_t size, int64_t block, int64_t vocab) {
    auto gen = at::detail::createCPUGenerator(1234);
    data_ = torch::randint(vocab, {size, block + 1}, gen, torch::kLong);
  }
  int64_t size() const override { return data_.size(0); }
  Batch get(int64_t i) const override { return {data_[i]}; }

 private:
  torch::Tensor data_;
};

struct ModelOptions {
  int64_t layers, d, nhead, ff, vocab;
  double lr;
  std::string optimizer;
  bool deferred;
};

/// The stock-layer language model (tests/stock_encoder_model.h at scale). Units: the embedding, each
/// encoder layer and the head, each a volt::hooked module; the final LayerNorm stays in the root.
class StockLM : public LightningModule {
 public:
  using Layer = Hooked<torch::nn::TransformerEncoderLayer>;
  explicit StockLM(ModelOptions o) : LightningModule("StockLM"), o_(std::move(o)) {
    if (!o_.deferred) build();
  }
  void configure_model() override {
    if (!built_) build();  // once: not again if the constructor built it, nor on a later fit
  }
  torch::Tensor training_step(const Batch& batch, int64_t) override {
    const torch::Tensor& tokens = batch[0];  // [B, T + 1]
    const int64_t t = tokens.size(1) - 1;
    const auto x = tokens.narrow(1, 0, t).t();  // [T, B]: the encoder is sequence-first
    const auto y = tokens.narrow(1, 1, t).t();
    const auto mask = torch::full({t, t}, -std::numeric_limits<float>::infinity()).triu(1);  // causal
    torch::Tensor h = embed->forward(x);
    for (const auto& layer : *layers) h = layer->as<Layer::ContainedType>()->forward(h, mask);
    const auto logits = head->forward(norm->forward(h));
    return torch::nn::functional::cross_entropy(logits.reshape({-1, o_.vocab}), y.reshape({-1}));
  }
  Optimizers configure_optimizers() override {
    if (o_.optimizer == "adamw")
      return std::make_shared<torch::optim::AdamW>(parameters(), torch::optim::AdamWOptions(o_.lr));
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(o_.lr));  // no momentum
  }

  Hooked<torch::nn::Embedding> embed{nullptr};
  torch::nn::ModuleList layers{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  Hooked<torch::nn::Linear> head{nullptr};
  int64_t params = 0, largest_unit = 0;  // counted as built (before wrap() shards a unit)

 private:
  template <class M>
  M unit(M m) {
    int64_t n = 0;
    for (const auto& p : m->parameters()) n += p.numel();
    params += n;
    largest_unit = std::max(largest_unit, n);
    return o_.deferred ? wrap(m) : m;
  }
  void build() {
    built_ = true;
    embed = register_module("embed", unit(hooked(torch::nn::Embedding(o_.vocab, o_.d))));
    layers = register_module("layers", torch::nn::ModuleList());
    for (int64_t i = 0; i < o_.layers; ++i) {
      auto opts = torch::nn::TransformerEncoderLayerOptions(o_.d, o_.nhead).dim_feedforward(o_.ff).dropout(0.0);
      layers->push_back(unit(hooked(torch::nn::TransformerEncoderLayer(opts))));
    }
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o_.d})));
    params += 2 * o_.d;
    head = register_module("head", unit(hooked(torch::nn::Linear(o_.d, o_.vocab))));
  }
  ModelOptions o_;
  bool built_ = false;
};

/// Set-up peak at on_train_start, step times, and the peak of the steps (before teardown).
class Probe : public Callback {
 public:
  std::string state_key() const override { return "BenchFSDPInitProbe"; }
  void on_train_start(Trainer&, LightningModule&) override {
    setup_peak = bench::hwm_bytes();  // model built and sharded, optimizer set up
    bench::reset_peak();              // if refused, train_peak is the whole fit's peak: still right
  }
  void on_train_batch_start(Trainer&, LightningModule&, const Batch&, int64_t) override { t0_ = Clock::now(); }
  void on_train_batch_end(Trainer&, LightningModule&, const torch::Tensor&, const Batch&, int64_t) override {
    step.push_back(seconds_since(t0_));
  }
  void on_train_end(Trainer&, LightningModule&) override { train_peak = bench::hwm_bytes(); }

  std::vector<double> step;
  double setup_peak = -1, train_peak = -1;

 private:
  Clock::time_point t0_;
};

/// One configuration, on every rank of a (world, deferred) job; rank 0 appends a result line.
int run_one(const Args& a) {
  spdlog::set_level(spdlog::level::warn);
  const int64_t world = a.run_world;
  if (world == 1) torch::set_num_threads(static_cast<int>(volt::detail::available_cores()));
  const std::string opt = world == 1 ? a.baseline_optimizer : a.optimizer;

  DataLoaderOptions lo;
  lo.batch_size = a.batch;
  DataLoader loader(std::make_shared<RandomTokens>(a.batch * world * (a.steps + 1), a.block, a.vocab), lo);

  TrainerOptions t = bench::quiet_trainer_options(a.steps);
  t.accelerator = "cpu";
  t.devices = world;
  if (world > 1) {
    t.strategy = "fsdp";
    t.strategy.fsdp.sharding_strategy = ShardingStrategy::FullShard;
    t.strategy.fsdp.auto_wrap_policy.module_types = {"TransformerEncoderLayer", "Embedding", "Linear"};
  }

  const double base = bench::rss_bytes();  // just before the model is built
  torch::manual_seed(1);                   // deferred "no": the same values on every rank
  StockLM model({a.layers, a.d, a.nhead, a.ff, a.vocab, a.lr, opt, a.run_deferred == "yes"});
  auto probe = std::make_shared<Probe>();
  Trainer trainer(t, {probe});
  trainer.fit(model, loader);

  const double setup_growth = probe->setup_peak - base;
  const double whole_growth = std::max(probe->setup_peak, probe->train_peak) - base;
  auto mx = trainer.strategy().all_reduce(
      torch::tensor({bench::median(probe->step), setup_growth, whole_growth, base}, torch::kDouble), ReduceOp::Max);
  const int64_t threads = torch::get_num_threads();
  if (trainer.global_rank() != 0) return 0;

  const auto r = mx.contiguous();
  const double* v = r.data_ptr<double>();
  std::ofstream out(a.out, std::ios::app);
  out.precision(17);
  out << world << ' ' << a.run_deferred << ' ' << opt << ' ' << trainer.world_size() << ' ' << threads << ' '
      << model.params << ' ' << model.largest_unit << ' ' << probe->step.size();
  for (int i = 0; i < 4; ++i) out << ' ' << v[i];
  out << '\n';
  return out ? 0 : 1;
}

struct Row {
  int64_t world = 0, processes = 0, threads = 0, params = 0, largest_unit = 0, steps = 0;
  std::string deferred, optimizer;
  double step_s = 0, setup_growth = 0, whole_growth = 0, base = 0;
  bool ok = false;
  std::string error;
};

int run_all(int argc, char** argv, const Args& a) {
  char tmpl[] = "/tmp/bench_fsdp_init_XXXXXX";
  std::string out = a.results;
  if (out.empty()) {
    const int fd = ::mkstemp(tmpl);
    if (fd < 0) throw std::runtime_error("cannot create a temp file");
    ::close(fd);
    out = tmpl;
  }
  auto have_result = [&](int64_t world, const std::string& deferred) {
    std::ifstream in(out);
    for (std::string line; std::getline(in, line);) {
      std::istringstream f(line);
      int64_t w = 0;
      std::string d;
      if (f >> w >> d && w == world && d == deferred) return true;
    }
    return false;
  };

  std::vector<Row> rows;
  const auto t_all = Clock::now();
  for (int64_t world : a.worlds) {
    for (const auto& d : a.deferred) {
      if (world < 1 || (world == 1 && d != a.deferred.front())) continue;  // one single-device row
      Row r;
      r.world = world;
      r.deferred = d;
      if (!have_result(world, d)) {
        std::fprintf(stderr, "bench_fsdp_init: world %lld, deferred %s ...\n", static_cast<long long>(world),
                     d.c_str());
        const auto t0 = Clock::now();
        const int rc = bench::spawn_self(argv, argc, {"--run", std::to_string(world), d, "--out", out});
        std::fprintf(stderr, "bench_fsdp_init: world %lld, deferred %s: exit %d after %.0f s\n",
                     static_cast<long long>(world), d.c_str(), rc, seconds_since(t0));
        if (rc != 0) r.error = "failed (exit " + std::to_string(rc) + ")";
      }
      rows.push_back(r);
    }
  }
  std::ifstream in(out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    Row r;
    f >> r.world >> r.deferred >> r.optimizer >> r.processes >> r.threads >> r.params >> r.largest_unit >> r.steps >>
        r.step_s >> r.setup_growth >> r.whole_growth >> r.base;
    if (!f) continue;
    r.ok = true;
    for (auto& row : rows)
      if (row.world == r.world && row.deferred == r.deferred && row.error.empty()) row = r;
  }
  if (a.results.empty()) std::remove(out.c_str());

  const Row* any = nullptr;
  for (const auto& r : rows)
    if (r.ok && !any) any = &r;
  if (!any) {
    std::fprintf(stderr, "bench_fsdp_init: no configuration produced results\n");
    return 1;
  }
  auto mb = [](double b) { return b / 1e6; };
  const double psi = static_cast<double>(any->params);
  std::printf(
      "\nFSDP FULL_SHARD set-up memory, deferred init vs whole model per rank, stock torch::nn layers: embedding "
      "%lld x %lld, %lld x TransformerEncoderLayer(d %lld, nhead %lld, ff %lld), LayerNorm, Linear head: Ψ = %lld "
      "parameters (4Ψ = %.1f MB fp32), largest unit %lld parameters; batch %lld x block %lld per rank, %lld steps "
      "(median), %lld cores split among the ranks\n\n",
      static_cast<long long>(a.vocab), static_cast<long long>(a.d), static_cast<long long>(a.layers),
      static_cast<long long>(a.d), static_cast<long long>(a.nhead), static_cast<long long>(a.ff),
      static_cast<long long>(any->params), mb(4 * psi), static_cast<long long>(any->largest_unit),
      static_cast<long long>(a.batch), static_cast<long long>(a.block), static_cast<long long>(a.steps),
      static_cast<long long>(volt::detail::available_cores()));
  std::printf(
      "| world N | deferred | Ψ | 4Ψ (MB) | largest unit (MB) | goal 1.1(4Ψ/N + unit) (MB) | set-up peak growth / rank "
      "(MB) | set-up / goal | whole-run peak growth / rank (MB) | optimizer | cost model (MB) | whole / cost model "
      "| step (s) |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (const auto& r : rows) {
    if (!r.ok) {
      std::printf("| %lld | %s | %s | | | | | | | | | | |\n", static_cast<long long>(r.world), r.deferred.c_str(),
                  r.error.empty() ? "no result" : r.error.c_str());
      continue;
    }
    const double p = static_cast<double>(r.params), n = static_cast<double>(r.world);
    const double unit = 4.0 * static_cast<double>(r.largest_unit);
    const double goal = 1.1 * (4 * p / n + unit);
    const bool adamw = r.optimizer == "adamw";
    const double model = (adamw ? 16 : 8) * p / n;
    std::printf("| %lld | %s | %lld | %.0f | %.0f | %.0f | %.0f | %.2f | %.0f | %s | %.0f (%s) | %.2f | %.2f |\n",
                static_cast<long long>(r.world), r.deferred.c_str(), static_cast<long long>(r.params), mb(4 * p),
                mb(unit), mb(goal), mb(r.setup_growth), r.setup_growth / goal, mb(r.whole_growth),
                adamw ? "AdamW" : "SGD (no momentum)", mb(model), adamw ? "16Ψ/N" : "8Ψ/N", r.whole_growth / model,
                r.step_s);
  }
  std::printf(
      "\nGrowth is over the RSS just before the model is built (max over ranks). Set-up: up to on_train_start "
      "(model built, sharded, optimizer set up; AdamW's moments are allocated at the first step). Whole run: "
      "set-up and steps, before teardown. Deferred \"no\" builds the whole model (4Ψ) on every rank first.\n");
  std::printf("Total wall time %.0f s.\n", seconds_since(t_all));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    bench::track_live_memory();  // freed large tensors go back to the OS: RSS follows live memory
    const Args a = parse(argc, argv);
    if (a.run_world > 0) {
      if (a.out.empty()) throw std::invalid_argument("--run needs --out FILE");
      return run_one(a);
    }
    return run_all(argc, argv, a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_fsdp_init: error: %s\n", e.what());
    return 1;
  }
}
