// DDP with 2 processes vs 1 process on the demo Transformer at configs/default.yaml's size (ninp 200,
// nhid 200, nlayers 2, nhead 2, batch 20 per process, block 35, SGD, clip 1.0) on the CPU: median
// step time, throughput, communication time per step and the bytes each rank sends per step,
// against the ring all-reduce model 2(N-1)/N * Psi (Psi = parameter bytes).
//
// Usage: bench_ddp [data_dir] [steps]      (defaults: ../shared/data/wikitext-2, 20)
//
// The process you start runs the 1-process baselines, then a Trainer with devices: 2 and
// strategy: ddp self-launches rank 1 (this binary again, same arguments, as the CLI does). A
// launched rank (RANK set) runs only the DDP part. Only rank 0 prints the markdown table.
//
// Columns: "backward + sync" is loss.backward() including DDP's wait for the last gradient bucket;
// "all-reduce alone" is the same buckets (<= 25 MB each) all-reduced with nothing else running;
// "sent / rank" is ProcessGroup::bytes_sent(), reset every step (what volt hands to the backend,
// counted with the ring model); "loopback / rank" is the loopback interface's TX bytes during the
// step (/proc/net/dev, machine-wide: an independent check on a quiet machine) divided by N.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "volt/demos/language_model.h"
#include "volt/demos/wikitext2_data.h"
#include "volt/distributed/cluster_env.h"
#include "volt/distributed/launcher.h"
#include "volt/strategies/parallel_strategy.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int64_t kWarmup = 3;  // steps left out of the medians

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Bytes sent on the loopback interface so far (machine-wide), or -1 where /proc/net/dev has none.
int64_t loopback_tx_bytes() {
  std::ifstream in("/proc/net/dev");
  for (std::string line; std::getline(in, line);) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(0, name.find_first_not_of(' '));
    if (name != "lo") continue;
    std::istringstream fields(line.substr(colon + 1));
    int64_t v = 0;
    for (int i = 0; i < 9 && (fields >> v); ++i) {
    }
    return fields ? v : -1;  // the 9th number: TX bytes
  }
  return -1;
}

/// Per-step timings and traffic of one run (rank 0's view).
class Probe : public Callback {
 public:
  std::string state_key() const override { return "BenchProbe"; }
  void setup(Trainer& t, LightningModule&, const std::string&) override {
    pg_ = nullptr;
    if (auto* ps = dynamic_cast<ParallelStrategy*>(&t.strategy()); ps && t.world_size() > 1) pg_ = &ps->process_group();
  }
  void on_train_batch_start(Trainer&, LightningModule&, const Batch&, int64_t) override {
    if (pg_) pg_->reset_bytes_sent();
    lo0_ = loopback_tx_bytes();
    t0_ = Clock::now();
  }
  void on_before_backward(Trainer&, LightningModule&, const torch::Tensor&) override { b0_ = Clock::now(); }
  void on_after_backward(Trainer&, LightningModule&) override { backward.push_back(seconds_since(b0_)); }
  void on_train_batch_end(Trainer&, LightningModule&, const torch::Tensor&, const Batch&, int64_t) override {
    step.push_back(seconds_since(t0_));
    const int64_t lo = loopback_tx_bytes();
    loopback.push_back(lo >= 0 && lo0_ >= 0 ? static_cast<double>(lo - lo0_) : -1.0);
    sent.push_back(pg_ ? static_cast<double>(pg_->bytes_sent()) : 0.0);
  }
  std::vector<double> step, backward, sent, loopback;

 private:
  ProcessGroup* pg_ = nullptr;
  Clock::time_point t0_, b0_;
  int64_t lo0_ = -1;
};

template <class T>
std::vector<T> after_warmup(const std::vector<T>& v) {
  return v.size() > static_cast<size_t>(kWarmup) ? std::vector<T>(v.begin() + kWarmup, v.end()) : v;
}

struct Result {
  std::string label;
  int64_t processes = 1, threads = 1, global_batch = 0, param_bytes = 0;
  double step_s = 0, backward_s = 0, sent = 0, loopback = -1, allreduce_alone_s = 0;
  size_t steps = 0;
};

/// All-reduces `param_bytes` of fp32 gradients in DDP's bucket sizes with nothing else running;
/// the median of `reps` rounds. Every rank must call it.
double allreduce_alone(ProcessGroup& pg, int64_t param_bytes, double bucket_cap_mb, int reps = 5) {
  const int64_t cap = static_cast<int64_t>(bucket_cap_mb * 1024 * 1024) / 4;
  std::vector<torch::Tensor> buckets;
  for (int64_t left = param_bytes / 4; left > 0; left -= cap) buckets.push_back(torch::randn({std::min(left, cap)}));
  std::vector<double> times;
  for (int r = 0; r < reps + 1; ++r) {
    pg.barrier("bench");
    const auto t0 = Clock::now();
    for (auto& b : buckets) pg.all_reduce(b, ReduceOp::Mean);
    if (r > 0) times.push_back(seconds_since(t0));  // the first round warms up
  }
  return median(times);
}

Result run(const std::string& label, demos::WikiText2Data& data, const demos::LanguageModelOptions& mopt, int64_t steps,
           int64_t devices, int64_t threads, int64_t batch_size) {
  if (devices == 1) torch::set_num_threads(static_cast<int>(threads));  // DDP ranks: the launcher sets it
  torch::manual_seed(1);
  demos::LanguageModel model(mopt);
  auto loader = data.train_loader();
  TrainerOptions t;
  t.accelerator = "cpu";
  t.devices = devices;
  t.strategy = devices > 1 ? "ddp" : "auto";
  t.max_steps = steps;
  t.gradient_clip_val = 1.0;
  t.enable_progress_bar = false;
  t.enable_model_summary = false;
  t.enable_checkpointing = false;
  t.logger = false;
  t.num_sanity_val_steps = 0;
  auto probe = std::make_shared<Probe>();
  Trainer trainer(t, {probe});
  trainer.fit(model, *loader);

  Result r;
  r.label = label;
  r.processes = trainer.world_size();
  r.threads = torch::get_num_threads();
  r.global_batch = batch_size * r.processes;
  for (const auto& p : model.parameters()) r.param_bytes += p.numel() * p.element_size();
  r.steps = after_warmup(probe->step).size();
  r.step_s = median(after_warmup(probe->step));
  r.backward_s = median(after_warmup(probe->backward));
  r.sent = median(after_warmup(probe->sent));
  const auto lo = after_warmup(probe->loopback);
  r.loopback = std::any_of(lo.begin(), lo.end(), [](double x) { return x < 0; })
                   ? -1
                   : median(lo) / static_cast<double>(r.processes);
  if (auto* ps = dynamic_cast<ParallelStrategy*>(&trainer.strategy()); ps && r.processes > 1)
    r.allreduce_alone_s = allreduce_alone(ps->process_group(), r.param_bytes, t.strategy.ddp.bucket_cap_mb);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string dir = argc > 1 ? argv[1] : "../shared/data/wikitext-2";
    const int64_t steps = argc > 2 ? std::stoll(argv[2]) : 20;
    if (steps <= kWarmup + 2) {
      std::fprintf(stderr, "bench_ddp: steps must be > %lld\n", static_cast<long long>(kWarmup + 2));
      return 2;
    }
    spdlog::set_level(spdlog::level::warn);
    const bool launched = ClusterEnv::detect().source != "none";  // a rank started by a launcher
    const int64_t cores = volt::detail::available_cores();
    const int64_t world = 2;

    demos::WikiText2DataOptions dopt;  // configs/default.yaml: block 35, batch 20
    dopt.data_dir = dir;
    demos::WikiText2Data data(dopt);
    demos::LanguageModelOptions mopt;  // configs/default.yaml: ninp 200, nhid 200, 2 layers, 2 heads
    mopt.vocab_size = data.vocab_size();
    mopt.ninp = 200;
    mopt.nhid = 200;
    mopt.nlayers = 2;
    mopt.nhead = 2;
    mopt.dropout = 0.2;
    mopt.optimizer = "sgd";
    mopt.lr = 0.1;

    std::vector<Result> results;
    const int64_t per_rank_threads = std::max<int64_t>(1, cores / world);
    if (!launched) {
      results.push_back(run("1 process, all cores", data, mopt, steps, 1, cores, dopt.batch_size));
      if (per_rank_threads != cores)
        results.push_back(run("1 process, a rank's cores", data, mopt, steps, 1, per_rank_threads, dopt.batch_size));
    }
    results.push_back(run("DDP", data, mopt, steps, world, per_rank_threads, dopt.batch_size));
    if (launched && std::getenv("RANK") && std::string(std::getenv("RANK")) != "0") return 0;

    const Result& ddp = results.back();
    const double psi = static_cast<double>(ddp.param_bytes);
    const double model = 2.0 * (ddp.processes - 1) / ddp.processes * psi;
    auto mb = [](double b) { return b / 1e6; };
    std::printf(
        "\nDDP vs 1 process, demo Transformer (ninp 200, nhid 200, 2+2 layers, vocab %lld), batch %lld x "
        "block %lld per process, %lld timed steps after %lld warm-up, %lld cores\n\n",
        static_cast<long long>(mopt.vocab_size), static_cast<long long>(dopt.batch_size),
        static_cast<long long>(dopt.block_size), static_cast<long long>(ddp.steps), static_cast<long long>(kWarmup),
        static_cast<long long>(cores));
    std::printf(
        "| run | processes x threads | global batch | median step (ms) | samples/s | backward + sync (ms) "
        "| all-reduce alone (ms) | sent / rank / step (MB) | 2(N-1)/N·Ψ (MB) | sent / model | loopback / rank / "
        "step (MB) |\n");
    std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for (const auto& r : results) {
      const double m = r.processes > 1 ? 2.0 * (r.processes - 1) / r.processes * psi : 0.0;
      char lo[32] = "n/a";
      if (r.loopback >= 0) std::snprintf(lo, sizeof lo, "%.2f", mb(r.loopback));
      char ratio[32] = "-", alone[32] = "-";
      if (m > 0) std::snprintf(ratio, sizeof ratio, "%.3f", r.sent / m);
      if (r.processes > 1) std::snprintf(alone, sizeof alone, "%.1f", r.allreduce_alone_s * 1e3);
      std::printf("| %s | %lld x %lld | %lld | %.1f | %.1f | %.1f | %s | %.2f | %.2f | %s | %s |\n", r.label.c_str(),
                  static_cast<long long>(r.processes), static_cast<long long>(r.threads),
                  static_cast<long long>(r.global_batch), r.step_s * 1e3, r.global_batch / r.step_s, r.backward_s * 1e3,
                  alone, mb(r.sent), mb(m), ratio, lo);
    }
    std::printf(
        "\nΨ = %.2f MB (%lld fp32 parameters); ring all-reduce model: each rank sends 2(N-1)/N·Ψ = %.2f MB "
        "per step for N = %lld.\n",
        mb(psi), static_cast<long long>(ddp.param_bytes / 4), mb(model), static_cast<long long>(ddp.processes));
    if (results.size() > 1) {
      const Result& all = results.front();
      const Result& same = results[results.size() - 2];  // 1 process with a rank's threads
      std::printf("DDP throughput vs 1 process on all cores: %.2fx; vs 1 process with a rank's threads: %.2fx.\n",
                  (ddp.global_batch / ddp.step_s) / (all.global_batch / all.step_s),
                  (ddp.global_batch / ddp.step_s) / (same.global_batch / same.step_s));
      std::printf(
          "Exposed communication (DDP backward + sync - 1-process backward, same threads per process): "
          "%.1f ms per step, of %.1f ms all-reduce alone.\n",
          (ddp.backward_s - same.backward_s) * 1e3, ddp.allreduce_alone_s * 1e3);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ddp: error: %s\n", e.what());
    return 1;
  }
}
