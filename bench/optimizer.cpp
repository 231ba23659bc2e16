// Host optimizer step: torch::optim::AdamW vs volt's fused AdamW (optim/fused_adam.h) on the
// parameter shapes of the 1B demo Transformer's layers (ninp 1024, nhid 4096): the step that CPU
// training and FSDP's cpu_offload run on the host. Side by side in one run, alternating, per thread
// count: median step time, effective memory bandwidth (28 bytes an element: p, g, m, v read; p, m,
// v written), peak resident memory the step adds (torch::optim's temporaries). torch::optim runs
// twice: with glibc's defaults, and with freed memory kept in the heap (no page faults for its
// temporaries after the first step), its best case.
// Then the whole training step through the Trainer, single device, on a demo Transformer with the
// 1B configuration's layer width (ninp 1024, nhid 4096, 1+1 layers, WikiText-2 vocabulary): AdamW
// through volt's fused step vs the same AdamW as a subclass, which volt leaves to its own
// torch::optim step().
// Between the two tables, the gradient norm that clipping by norm computes (Strategy::gradient_norm)
// against the same norm asked of ATen in fp64 per tensor, on the same gradients.
// Usage: bench_optimizer [--layers 1,4,8] [--threads 1,2] [--steps 5] [--data DIR] [--train_steps 4]
#include <ATen/Parallel.h>
#include <malloc.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_util.h"
#include "volt/demos/language_model.h"
#include "volt/demos/wikitext2_data.h"
#include "volt/distributed/launcher.h"
#include "volt/optim/fused_adam.h"
#include "volt/strategies/strategy.h"
#include "volt/trainer/trainer.h"

using Clock = std::chrono::steady_clock;

namespace {

/// One encoder layer's parameters: in_proj (3d x d) + bias, out_proj (d x d) + bias, linear1/2
/// (nhid x d, d x nhid) + biases, two LayerNorms.
std::vector<torch::Tensor> layer_params(int64_t layers) {
  const int64_t d = 1024, h = 4096;
  std::vector<std::vector<int64_t>> shapes = {{3 * d, d}, {3 * d}, {d, d}, {d}, {h, d}, {h},
                                              {d, h},     {d},     {d},    {d}, {d},    {d}};
  std::vector<torch::Tensor> out;
  for (int64_t l = 0; l < layers; ++l)
    for (auto &s : shapes) out.push_back((torch::randn(s) * 0.02).requires_grad_(true));
  return out;
}

/// Keep freed memory in the heap (largest mmap threshold glibc allows, no trimming), or go back to
/// glibc's defaults.
void keep_heap(bool keep) {
  ::mallopt(M_MMAP_THRESHOLD, keep ? 32 * 1024 * 1024 : 128 * 1024);
  ::mallopt(M_TRIM_THRESHOLD, keep ? 1 << 30 : 128 * 1024);
}

struct Result {
  double ms = 0, peak_mb = 0;
};

Result run(std::vector<torch::Tensor> &params, bool fused, int steps) {
  torch::optim::AdamW opt(params, torch::optim::AdamWOptions(1e-4));
  for (auto &p : params) p.mutable_grad() = torch::randn_like(p) * 1e-3;
  auto step = [&] {
    if (!fused) {
      opt.step();
    } else if (!volt::fused_adam_step(opt)) {
      std::fprintf(stderr, "fused step declined\n");
      std::exit(1);
    }
  };
  step();  // the state (exp_avg, exp_avg_sq) is allocated here
  std::vector<double> times;
  const bool peak_ok = volt::bench::reset_peak();
  const double base = volt::bench::rss_bytes();
  for (int i = 0; i < steps; ++i) {
    auto t0 = Clock::now();
    step();
    times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  Result r;
  r.ms = volt::bench::median(times);
  r.peak_mb = peak_ok ? (volt::bench::hwm_bytes() - base) / 1e6 : -1;
  return r;
}

/// torch::optim::AdamW under another type: volt's strategies run its own step().
struct TorchAdamW : torch::optim::AdamW {
  using torch::optim::AdamW::AdamW;
};

/// The demo model with its AdamW (same groups and options) swapped for TorchAdamW.
class TorchOptimModel : public volt::demos::LanguageModel {
 public:
  using LanguageModel::LanguageModel;
  volt::Optimizers configure_optimizers() override {
    auto c = LanguageModel::configure_optimizers()[0];
    std::vector<torch::optim::OptimizerParamGroup> groups;
    for (auto &g : c.optimizer->param_groups()) groups.emplace_back(g.params(), g.options().clone());
    c.optimizer = std::make_shared<TorchAdamW>(groups);
    return c;
  }
};

struct StepTimer : volt::Callback {
  std::string state_key() const override { return "StepTimer"; }
  void on_train_batch_start(volt::Trainer &, volt::LightningModule &, const volt::Batch &, int64_t) override {
    t0 = Clock::now();
  }
  void on_train_batch_end(volt::Trainer &, volt::LightningModule &, const torch::Tensor &, const volt::Batch &,
                          int64_t i) override {
    if (i >= 2) times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  Clock::time_point t0;
  std::vector<double> times;
};

/// Median training step (ms) of `steps` steps after 2 warm-up steps, fused or torch::optim.
double train(const std::string &data_dir, bool fused, int64_t steps, int64_t *n_params) {
  volt::demos::WikiText2DataOptions d;
  d.data_dir = data_dir;
  d.shuffle = false;
  d.batch_size = 4;
  d.block_size = 32;
  volt::demos::WikiText2Data data(d);
  volt::demos::LanguageModelOptions m;
  m.vocab_size = data.vocab_size();
  m.ninp = 1024;
  m.nhid = 4096;
  m.nhead = 16;
  m.nlayers = 1;
  m.dropout = 0.0;
  m.optimizer = "adamw";
  m.lr = 1e-4;
  torch::manual_seed(1);
  std::unique_ptr<volt::demos::LanguageModel> model =
      fused ? std::make_unique<volt::demos::LanguageModel>(m) : std::make_unique<TorchOptimModel>(m);
  auto timer = std::make_shared<StepTimer>();
  {
    volt::Trainer t(volt::bench::quiet_trainer_options(steps + 2), {timer});
    auto loader = data.train_loader();
    t.fit(*model, *loader);
  }
  *n_params = 0;
  for (auto &p : model->parameters()) *n_params += p.numel();
  return volt::bench::median(timer->times);
}

/// Clipping by norm's reduction over `params`' gradients, two ways, median ms of `steps` after one:
/// volt's Strategy::gradient_norm (fp32 norms of rows of 1024 elements, summed in fp64) and
/// the same reduction asked for fp64 per tensor (volt's before; ATen copies each fp32 gradient to
/// fp64 first). Prints a table row with both norms' relative difference.
void gradient_norm_row(std::vector<torch::Tensor> &params, int steps) {
  for (auto &p : params) p.mutable_grad() = torch::randn_like(p) * 1e-3;
  torch::optim::SGD opt(params, torch::optim::SGDOptions(0.1));
  volt::SingleDeviceStrategy strategy(volt::Precision("32-true", "cpu"), "cpu");
  auto fp64 = [&] {
    std::vector<torch::Tensor> norms;
    for (auto &p : params) norms.push_back(torch::norm(p.grad(), 2, torch::kDouble));
    return std::sqrt(torch::stack(norms).square().sum().item<double>());
  };
  auto time = [&](auto &&fn, double *value) {
    *value = fn();
    std::vector<double> times;
    for (int i = 0; i < steps; ++i) {
      auto t0 = Clock::now();
      *value = fn();
      times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    return volt::bench::median(times);
  };
  double n64 = 0, n32 = 0;
  const double ms64 = time(fp64, &n64);
  const double ms32 = time([&] { return strategy.gradient_norm(opt); }, &n32);
  int64_t n = 0;
  for (auto &p : params) n += p.numel();
  std::printf("| %.1f M | %d | %.1f ms | %.1f ms | %.2fx | %.1e |\n", n / 1e6, at::get_num_threads(), ms64, ms32,
              ms64 / ms32, std::abs(n32 - n64) / n64);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char **argv) {
  std::vector<std::string> layers = {"1", "4", "8"}, threads = {"1", "2"};
  int steps = 5;
  int64_t train_steps = 4;
  std::string data_dir = "../shared/data/wikitext-2";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--layers")
      layers = volt::bench::split_list(argv[i + 1]);
    else if (k == "--threads")
      threads = volt::bench::split_list(argv[i + 1]);
    else if (k == "--steps")
      steps = std::stoi(argv[i + 1]);
    else if (k == "--train_steps")
      train_steps = std::stoll(argv[i + 1]);
    else if (k == "--data")
      data_dir = argv[i + 1];
    else {
      std::fprintf(stderr,
                   "unknown option %s (use --layers, --threads, --steps, "
                   "--train_steps, --data)\n",
                   argv[i]);
      return 2;
    }
  }
  // glibc's default allocator (no track_live_memory): torch::optim's temporaries reuse freed heap
  // memory as they would in training, rather than being mapped and faulted in afresh each time.
  {
    torch::NoGradGuard ng;
    std::printf(
        "| params | threads | torch::optim::AdamW | torch, heap kept | "
        "volt fused | speedup vs torch's best | fused GB/s | torch "
        "GB/s (best) | peak extra: torch | fused |\n");
    std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for (const auto &ls : layers) {
      torch::manual_seed(0);
      auto params = layer_params(std::stoll(ls));
      int64_t n = 0;
      for (auto &p : params) n += p.numel();
      for (const auto &ts : threads) {
        at::set_num_threads(std::stoi(ts));
        // Alternate, twice, and keep each one's better median (the machine is shared).
        Result t{1e30, 0}, k{1e30, 0}, f{1e30, 0};
        for (int round = 0; round < 2; ++round) {
          auto a = run(params, false, steps);
          keep_heap(true);
          auto c = run(params, false, steps);
          keep_heap(false);
          auto b = run(params, true, steps);
          if (a.ms < t.ms) t = a;
          if (c.ms < k.ms) k = c;
          if (b.ms < f.ms) f = b;
        }
        const double bytes = 28.0 * static_cast<double>(n);
        const double best = std::min(t.ms, k.ms);
        std::printf(
            "| %.1f M | %s | %.1f ms | %.1f ms | %.1f ms | %.1fx | "
            "%.1f | %.1f | %.0f MB | %.0f MB |\n",
            n / 1e6, ts.c_str(), t.ms, k.ms, f.ms, best / f.ms, bytes / f.ms / 1e6, bytes / best / 1e6, t.peak_mb,
            f.peak_mb);
        std::fflush(stdout);
      }
    }
  }
  {
    torch::NoGradGuard ng;
    std::printf(
        "\nGradient norm for clipping by norm (fp32 gradients of the same layers): fp64 reductions per "
        "tensor vs volt's fp32 norms of rows, summed in fp64\n\n| params | threads | fp64 per tensor | volt | "
        "speedup | relative difference |\n| --- | --- | --- | --- | --- | --- |\n");
    for (const auto &ls : layers) {
      torch::manual_seed(0);
      auto params = layer_params(std::stoll(ls));
      for (const auto &ts : threads) {
        at::set_num_threads(std::stoi(ts));
        gradient_norm_row(params, steps);
      }
    }
  }
  if (train_steps <= 0) return 0;
  spdlog::set_level(spdlog::level::warn);
  at::set_num_threads(static_cast<int>(volt::detail::available_cores()));
  std::vector<double> t_torch, t_fused;
  int64_t n = 0;
  // One run each (a step takes seconds on 2 cores): torch::optim first, then fused.
  t_torch.push_back(train(data_dir, false, train_steps, &n));
  t_fused.push_back(train(data_dir, true, train_steps, &n));
  const double a = *std::min_element(t_torch.begin(), t_torch.end());
  const double b = *std::min_element(t_fused.begin(), t_fused.end());
  std::printf(
      "\nTrainer step, single device, demo Transformer %.1f M "
      "parameters (AdamW, batch 4 x 32, %d threads):\n\n",
      n / 1e6, at::get_num_threads());
  std::printf(
      "| optimizer step | median training step | speedup |\n| --- | "
      "--- | --- |\n");
  std::printf(
      "| torch::optim::AdamW | %.1f ms | |\n| volt fused AdamW | %.1f "
      "ms | %.2fx |\n",
      a, b, a / b);
  return 0;
}
