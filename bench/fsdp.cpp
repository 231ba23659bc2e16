// FSDP vs DDP on the CPU: the demo Transformer at ~108M parameters (vocab 33278, ninp 512, nhead 8,
// nhid 2048, 10 encoder + 10 decoder layers), AdamW, fp32, batch 2 x block 32 per rank. For world
// sizes 1, 2, 4 and strategies DDP, NO_SHARD, SHARD_GRAD_OP, FULL_SHARD (world 1: DDP only, i.e. a
// single device, the baseline) it measures, side by side in one invocation:
//   - median step time (after the warm-up steps; max over ranks),
//   - per-rank peak resident memory (VmHWM; max over ranks), absolute and as growth over the RSS the
//     process had just before the model was built, for the whole fit and for the training phase alone
//     (the peak is reset with /proc/self/clear_refs once setup is done, where the kernel allows it),
//   - the cost model's expectation beside it (fp32 Adam, 16 bytes per parameter, Ψ = parameter count):
//       DDP, NO_SHARD: 16Ψ;  SHARD_GRAD_OP: 4Ψ + 12Ψ/N;  FULL_SHARD: 16Ψ/N + 4 x largest unit (unsharded),
//   - bytes each rank sends per step (ProcessGroup::comm_stats, reset every step; max over ranks),
//   - communication time per step and how much of it was hidden behind computation: each
//     collective's launch-to-completion time (seen on Gloo's threads) summed over the step, minus the
//     time the training thread spent waiting for collectives (CommStats::hidden_seconds).
//
// Usage: bench_fsdp [data_dir] [--steps 3] [--warmup 1] [--batch 2] [--block 32] [--vocab 33278] [--ninp 512]
//                   [--nhead 8] [--nhid 2048] [--nlayers 10] [--lr 3e-4] [--forward-prefetch] [--in-backward]
//                   [--glibc-malloc]
//                   [--worlds 1,2,4] [--strategies ddp,no_shard,shard_grad_op,full_shard] [--results FILE]
//   One configuration of a job across hosts (bench/hosts.py runs one per host, with NODE_RANK,
//   MASTER_ADDR and MASTER_PORT set): bench_fsdp --run STRATEGY DEVICES --num_nodes N --out FILE;
//   STRATEGY may also be hybrid_shard there. Each rank then also reads its host's eth0 counters:
//   the bytes the host sent over its link per step.
// A full run takes about 15 minutes on 2 cores; --results FILE keeps the raw results and resumes.
// (data_dir defaults to ../shared/data/wikitext-2.)
//
// How it runs: the process you start runs nothing itself; for every (strategy, world) it starts this
// binary again (/proc/self/exe, fork/exec, waitpid) with "--run STRATEGY WORLD --out FILE". That child
// builds a Trainer with devices = WORLD, which self-launches ranks 1..WORLD-1 (the same command line)
// and splits the cores among them. Rank 0 appends one line of results to FILE; when every
// configuration is done the parent prints one markdown table and a line of ratios.
//
// Memory notes: glibc's dynamic mmap threshold is pinned (mallopt) so that freed large tensors go back
// to the OS and RSS follows live memory (--glibc-malloc leaves glibc's defaults: faster, RSS above
// live memory; FSDP's own large buffers are mapped on their own either way, core/large_buffer.h). Under FSDP the demo
// builds its Transformer one unit at a time and each unit is sharded as soon as it is built (docs/fsdp.md, "Models that
// do not fit"), so no rank holds the whole model; bench_fsdp_init measures that set-up on a 1B model. The
// training-phase columns are the ones the cost model describes. DDP also holds gradient buckets (another 4Ψ unless
// gradient_as_bucket_view), which the 16Ψ model leaves out.
#include <malloc.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "volt/demos/language_model.h"
#include "volt/demos/wikitext2_data.h"
#include "volt/distributed/launcher.h"
#include "volt/strategies/fsdp/fsdp_strategy.h"
#include "volt/strategies/parallel_strategy.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using Clock = std::chrono::steady_clock;

namespace {

const std::vector<std::string> kAllStrategies = {"DDP", "NO_SHARD", "SHARD_GRAD_OP", "FULL_SHARD"};
const std::vector<std::string> kRunStrategies = {"DDP",        "NO_SHARD",     "SHARD_GRAD_OP",
                                                 "FULL_SHARD", "HYBRID_SHARD", "_HYBRID_SHARD_ZERO2"};

struct Args {
  std::string data_dir = "../shared/data/wikitext-2";
  int64_t steps = 3, warmup = 1, batch = 2, block = 32;
  int64_t vocab = 33278;  // at least; raised to the data's vocabulary if that is larger
  int64_t ninp = 512, nhead = 8, nhid = 2048, nlayers = 10;
  double lr = 3e-4;
  bool forward_prefetch = false;  // FSDP's forward_prefetch (default false, as PyTorch's)
  bool in_backward = false;       // FSDP's optimizer_in_backward (each unit steps and frees its gradient)
  bool glibc_malloc = false;      // leave glibc's dynamic mmap threshold alone (see main)
  std::vector<int64_t> worlds = {1, 2, 4};
  std::vector<std::string> strategies = kAllStrategies;
  // Internal: one configuration (the child's side).
  std::string run_strategy;
  int64_t run_world = 0;  // ranks on this node
  int64_t num_nodes = 1;
  std::string out;
  // --results FILE: keep the raw results there and skip configurations it already has (a long
  // run can be resumed, or the table printed again from a finished one).
  std::string results;
};

std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

Args parse(int argc, char** argv) {
  Args a;
  bool have_dir = false;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument("missing value after " + k);
      return argv[++i];
    };
    if (k == "--steps")
      a.steps = std::stoll(value());
    else if (k == "--warmup")
      a.warmup = std::stoll(value());
    else if (k == "--batch")
      a.batch = std::stoll(value());
    else if (k == "--block")
      a.block = std::stoll(value());
    else if (k == "--vocab")
      a.vocab = std::stoll(value());
    else if (k == "--ninp")
      a.ninp = std::stoll(value());
    else if (k == "--nhead")
      a.nhead = std::stoll(value());
    else if (k == "--nhid")
      a.nhid = std::stoll(value());
    else if (k == "--nlayers")
      a.nlayers = std::stoll(value());
    else if (k == "--forward-prefetch")
      a.forward_prefetch = true;
    else if (k == "--in-backward")
      a.in_backward = true;
    else if (k == "--glibc-malloc")
      a.glibc_malloc = true;
    else if (k == "--lr")
      a.lr = std::stod(value());
    else if (k == "--worlds") {
      a.worlds.clear();
      for (const auto& w : bench::split_list(value())) a.worlds.push_back(std::stoll(w));
    } else if (k == "--strategies") {
      a.strategies.clear();
      for (const auto& s : bench::split_list(value())) {
        const std::string u = upper(s);
        if (std::find(kAllStrategies.begin(), kAllStrategies.end(), u) == kAllStrategies.end())
          throw std::invalid_argument("unknown strategy '" + s + "' (ddp, no_shard, shard_grad_op, full_shard)");
        a.strategies.push_back(u);
      }
    } else if (k == "--run") {
      a.run_strategy = upper(value());
      a.run_world = std::stoll(value());
      if (std::find(kRunStrategies.begin(), kRunStrategies.end(), a.run_strategy) == kRunStrategies.end())
        throw std::invalid_argument("unknown strategy '" + a.run_strategy + "'");
    } else if (k == "--num_nodes") {
      a.num_nodes = std::stoll(value());
    } else if (k == "--out")
      a.out = value();
    else if (k == "--results")
      a.results = value();
    else if (k.rfind("--", 0) == 0)
      throw std::invalid_argument("unknown option " + k);
    else if (!have_dir) {
      a.data_dir = k;
      have_dir = true;
    } else
      throw std::invalid_argument("unexpected argument " + k);
  }
  if (a.steps < 1 || a.warmup < 0 || a.batch < 1 || a.block < 2) throw std::invalid_argument("bad steps/sizes");
  return a;
}

using bench::hwm_bytes;
using bench::median;
using bench::reset_peak;
using bench::rss_bytes;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Bytes this host sent over eth0 so far (the link between hosts in bench/hosts.py), -1 without one.
double link_tx_bytes() {
  std::ifstream in("/sys/class/net/eth0/statistics/tx_bytes");
  double v = -1;
  return in >> v ? v : -1;
}

/// Step times, bytes sent, parameter count and memory peaks of this rank.
class Probe : public Callback {
 public:
  std::string state_key() const override { return "BenchFSDPProbe"; }
  void on_train_start(Trainer& t, LightningModule& m) override {
    // Every group of the mesh (HYBRID_SHARD talks only in its "shard" and "replicate" groups).
    groups_.clear();
    if (auto* ps = dynamic_cast<ParallelStrategy*>(&t.strategy()); ps && t.world_size() > 1) {
      DeviceMesh& mesh = ps->device_mesh();
      groups_.push_back(&mesh.world());
      for (const auto& dim : mesh.layout().names)
        if (ProcessGroup* g = mesh.group(dim); g && g != &mesh.world()) groups_.push_back(g);
    }
    params = 0;
    largest_unit = 0;
    if (auto* fsdp = dynamic_cast<FSDPStrategy*>(&t.strategy())) {
      for (const auto& u : fsdp->units()) {
        params += u.numel;
        largest_unit = std::max(largest_unit, u.padded_numel);
      }
    } else {
      for (const auto& p : m.parameters()) params += p.numel();
    }
    setup_peak = hwm_bytes();  // model built and sharded, optimizer set up
    peak_reset = reset_peak();
  }
  void on_train_batch_start(Trainer&, LightningModule&, const Batch&, int64_t) override {
    for (ProcessGroup* g : groups_) g->reset_comm_stats();
    link0_ = link_tx_bytes();
    t0_ = Clock::now();
  }
  void on_train_batch_end(Trainer&, LightningModule&, const torch::Tensor&, const Batch&, int64_t) override {
    step.push_back(seconds_since(t0_));
    // Every collective of the step has been waited on by now (FSDP resolves its reduce-scatters at
    // the end of backward, DDP waits for its buckets before the optimizer).
    CommStats c{};
    for (ProcessGroup* g : groups_) {
      const CommStats s = g->comm_stats();
      c.bytes_sent += s.bytes_sent;
      c.busy_seconds += s.busy_seconds;
      c.blocked_seconds += s.blocked_seconds;
    }
    sent.push_back(static_cast<double>(c.bytes_sent));
    comm.push_back(c.busy_seconds);
    exposed.push_back(std::min(c.blocked_seconds, c.busy_seconds));
    link.push_back(link0_ < 0 ? 0.0 : link_tx_bytes() - link0_);
  }
  // The peak of the training phase, before teardown.
  void on_train_end(Trainer&, LightningModule&) override { train_peak = hwm_bytes(); }

  std::vector<double> step, sent;
  std::vector<double> comm;     // collectives' time in flight (s), overlapping ones added up
  std::vector<double> exposed;  // of which the training thread waited for (s)
  std::vector<double> link;     // bytes this host sent over eth0 during the step
  int64_t params = 0, largest_unit = 0;
  double setup_peak = -1, train_peak = -1;
  bool peak_reset = false;

 private:
  std::vector<ProcessGroup*> groups_;
  Clock::time_point t0_;
  double link0_ = -1;
};

/// One configuration: runs on every rank of a (strategy, world) job; rank 0 appends a result line.
int run_one(const Args& a) {
  spdlog::set_level(spdlog::level::warn);
  const int64_t world = a.run_world;
  if (world == 1) torch::set_num_threads(static_cast<int>(volt::detail::available_cores()));
  // Launched ranks get OMP_NUM_THREADS = cores / world from the launcher; rank 0 is set by it too.

  demos::WikiText2DataOptions dopt;
  dopt.data_dir = a.data_dir;
  dopt.batch_size = a.batch;
  dopt.block_size = a.block;
  dopt.shuffle = false;
  demos::WikiText2Data data(dopt);

  demos::LanguageModelOptions mopt;
  mopt.vocab_size = std::max(a.vocab, data.vocab_size());  // Lightning's 33278 (train.txt's) by default
  mopt.ninp = a.ninp;
  mopt.nhead = a.nhead;
  mopt.nhid = a.nhid;
  mopt.nlayers = a.nlayers;
  mopt.optimizer = "adamw";
  mopt.lr = a.lr;
  auto loader = data.train_loader();

  TrainerOptions t = bench::quiet_trainer_options(a.warmup + a.steps);
  t.accelerator = "cpu";
  t.devices = world;
  t.num_nodes = a.num_nodes;
  if (a.run_strategy == "DDP") {
    t.strategy = world * a.num_nodes > 1 ? "ddp" : "auto";
  } else {
    t.strategy = "fsdp";
    t.strategy.fsdp.sharding_strategy = a.run_strategy;
    t.strategy.fsdp.forward_prefetch = a.forward_prefetch;
    t.strategy.fsdp.optimizer_in_backward = a.in_backward;
    t.strategy.fsdp.auto_wrap_policy.module_types = {"TransformerEncoderLayer", "TransformerDecoderLayer", "Embedding",
                                                     "Linear"};
  }

  torch::manual_seed(1);
  demos::LanguageModel model(mopt);  // the Transformer itself is built in configure_model()
  auto probe = std::make_shared<Probe>();
  Trainer trainer(t, {probe});
  const double base = rss_bytes();  // just before the model is built
  trainer.fit(model, *loader);

  const auto timed = [&](const std::vector<double>& v) {
    return v.size() > static_cast<size_t>(a.warmup) ? std::vector<double>(v.begin() + a.warmup, v.end()) : v;
  };
  const double step_s = median(timed(probe->step));
  const double sent = median(timed(probe->sent));
  const double comm = median(timed(probe->comm));
  const double exposed = median(timed(probe->exposed));
  const double link = median(timed(probe->link));
  const double setup_peak = probe->setup_peak;
  const double train_peak = probe->train_peak;
  const double whole_peak = std::max(setup_peak, train_peak);
  const double reset_ok = probe->peak_reset ? 1.0 : 0.0;
  // Max over ranks (min for "reset worked everywhere").
  auto mx = trainer.strategy().all_reduce(torch::tensor({step_s, sent, whole_peak, whole_peak - base, train_peak,
                                                         train_peak - base, base, comm, exposed, link},
                                                        torch::kDouble),
                                          ReduceOp::Max);
  auto mn = trainer.strategy().all_reduce(torch::tensor({reset_ok}, torch::kDouble), ReduceOp::Min);
  const int64_t threads = torch::get_num_threads();
  if (trainer.global_rank() != 0) return 0;

  const auto r = mx.contiguous();
  const double* v = r.data_ptr<double>();
  std::ofstream out(a.out, std::ios::app);
  out.precision(17);
  out << a.run_strategy << ' ' << mopt.vocab_size << ' ' << world << ' ' << trainer.world_size() << ' ' << threads
      << ' ' << probe->params << ' ' << probe->largest_unit << ' ' << timed(probe->step).size();
  for (int i = 0; i < 7; ++i) out << ' ' << v[i];
  out << ' ' << mn.item<double>() << ' ' << v[7] << ' ' << v[8] << ' ' << v[9] << '\n';
  return out ? 0 : 1;
}

struct Row {
  std::string strategy;
  int64_t vocab = 0, world = 0, processes = 0, threads = 0, params = 0, largest_unit = 0, steps = 0;
  double step_s = 0, sent = 0, peak = 0, growth = 0, train_peak = 0, train_growth = 0, base = 0, reset_ok = 0;
  double comm = 0, exposed = 0;  // s per step: collectives in flight, and the part the step waited for
  double link = 0;               // bytes a host sent over its link per step (max over hosts)
  bool ok = false;
  std::string error;
};

double expected_bytes(const Row& r) {
  const double psi = static_cast<double>(r.params), n = static_cast<double>(r.world);
  if (r.strategy == "FULL_SHARD") return 16 * psi / n + 4.0 * static_cast<double>(r.largest_unit);
  if (r.strategy == "SHARD_GRAD_OP") return 4 * psi + 12 * psi / n;
  return 16 * psi;  // DDP, NO_SHARD
}

/// Runs one configuration as a child process (this binary with --run); rank 0 writes to `out`.
int spawn(char** argv, int argc, const std::string& strategy, int64_t world, const std::string& out) {
  return volt::bench::spawn_self(argv, argc, {"--run", strategy, std::to_string(world), "--out", out});
}

int run_all(int argc, char** argv, const Args& a) {
  char tmpl[] = "/tmp/bench_fsdp_XXXXXX";
  std::string out = a.results;
  if (out.empty()) {
    const int fd = ::mkstemp(tmpl);
    if (fd < 0) throw std::runtime_error("cannot create a temp file");
    ::close(fd);
    out = tmpl;
  }
  auto have_result = [&](const std::string& s, int64_t world) {
    std::ifstream in(out);
    for (std::string line; std::getline(in, line);) {
      std::istringstream f(line);
      std::string st;
      int64_t vocab = 0, w = 0;
      if (f >> st >> vocab >> w && st == s && w == world) return true;
    }
    return false;
  };
  const int64_t cores = volt::detail::available_cores();

  std::vector<Row> rows;
  const auto t_all = Clock::now();
  for (int64_t world : a.worlds) {
    for (const auto& s : a.strategies) {
      if (world < 1 || (world == 1 && s != "DDP")) continue;  // FSDP at world 1: nothing to shard
      Row r;
      r.strategy = s;
      r.world = world;
      if (have_result(s, world)) {
        rows.push_back(r);
        continue;
      }
      std::fprintf(stderr, "bench_fsdp: %s, world %lld ...\n", s.c_str(), static_cast<long long>(world));
      const auto t0 = Clock::now();
      const int rc = spawn(argv, argc, s, world, out);
      std::fprintf(stderr, "bench_fsdp: %s, world %lld: exit %d after %.0f s\n", s.c_str(),
                   static_cast<long long>(world), rc, seconds_since(t0));
      if (rc != 0) r.error = "failed (exit " + std::to_string(rc) + ")";
      rows.push_back(r);
    }
  }
  // Each successful child appended one line, in order; match them by (strategy, world).
  std::ifstream in(out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    Row r;
    f >> r.strategy >> r.vocab >> r.world >> r.processes >> r.threads >> r.params >> r.largest_unit >> r.steps >>
        r.step_s >> r.sent >> r.peak >> r.growth >> r.train_peak >> r.train_growth >> r.base >> r.reset_ok >> r.comm >>
        r.exposed >> r.link;
    if (!f) continue;
    r.ok = true;
    for (auto& row : rows)
      if (row.strategy == r.strategy && row.world == r.world && row.error.empty()) row = r;
  }
  if (a.results.empty()) std::remove(out.c_str());

  const Row* any = nullptr;
  for (const auto& r : rows)
    if (r.ok) any = any ? any : &r;
  if (!any) {
    std::fprintf(stderr, "bench_fsdp: no configuration produced results\n");
    return 1;
  }
  const double psi = static_cast<double>(any->params);
  bool reset_everywhere = true;
  for (const auto& r : rows)
    if (r.ok && r.reset_ok < 0.5) reset_everywhere = false;
  auto mb = [](double b) { return b / 1e6; };

  std::printf(
      "\nFSDP vs DDP on the CPU, demo Transformer (vocab %lld, ninp %lld, nhead %lld, nhid %lld, %lld+%lld "
      "layers): Ψ = %lld parameters (%.1f MB fp32), AdamW, fp32, batch %lld x block %lld per rank, median of "
      "%lld timed steps after %lld warm-up, %lld cores (split among the ranks), FSDP forward_prefetch %s, "
      "optimizer_in_backward %s, %s\n\n",
      static_cast<long long>(any->vocab), static_cast<long long>(a.ninp), static_cast<long long>(a.nhead),
      static_cast<long long>(a.nhid), static_cast<long long>(a.nlayers), static_cast<long long>(a.nlayers),
      static_cast<long long>(any->params), mb(4 * psi), static_cast<long long>(a.batch),
      static_cast<long long>(a.block), static_cast<long long>(a.steps), static_cast<long long>(a.warmup),
      static_cast<long long>(cores), a.forward_prefetch ? "on" : "off", a.in_backward ? "on" : "off",
      a.glibc_malloc ? "glibc's malloc as it comes" : "glibc's mmap threshold pinned (RSS follows live memory)");
  std::printf(
      "| strategy | world | threads/rank | step (s) | peak RSS / rank (MB) | growth, whole fit (MB) | "
      "growth, training (MB) | expected (MB) | training / expected | sent / rank / step (MB) | sent / 4Ψ | "
      "comm / step (s) | hidden (s) | hidden % |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (const auto& r : rows) {
    if (!r.ok) {
      std::printf("| %s | %lld | %s | | | | | | | | | | | |\n", r.strategy.c_str(), static_cast<long long>(r.world),
                  r.error.empty() ? "no result" : r.error.c_str());
      continue;
    }
    const double e = expected_bytes(r);
    const double hidden = std::max(0.0, r.comm - r.exposed);
    std::printf("| %s | %lld | %lld | %.2f | %.0f | %.0f | %.0f | %.0f | %.2f | %.1f | %.2f | %.3f | %.3f | %.0f |\n",
                r.strategy.c_str(), static_cast<long long>(r.world), static_cast<long long>(r.threads), r.step_s,
                mb(r.peak), mb(r.growth), mb(r.train_growth), mb(e), r.train_growth / e, mb(r.sent), r.sent / (4 * psi),
                r.comm, hidden, r.comm > 0 ? 100.0 * hidden / r.comm : 0.0);
  }
  int64_t largest = 0;
  for (const auto& r : rows)
    if (r.ok) largest = std::max(largest, r.largest_unit);
  std::printf(
      "\nExpected (fp32 Adam, 16 bytes/param): DDP and NO_SHARD 16Ψ = %.0f MB; SHARD_GRAD_OP 4Ψ + 12Ψ/N; "
      "FULL_SHARD 16Ψ/N + 4 x largest unit (%lld params unsharded = %.0f MB). Growth is over the RSS just "
      "before the model is built (max over ranks); \"whole fit\" includes building and sharding the model, "
      "\"training\" is the peak from the first step on%s. Comm: each collective's time from launch to completion "
      "(Gloo's threads), summed over the step (overlapping collectives add up); hidden: the part during which the "
      "training thread was not waiting for it (computing). Max over ranks, median over steps. Sent: ring model DDP / "
      "NO_SHARD 2(N-1)/N·4Ψ, SHARD_GRAD_OP and FULL_SHARD (N-1)/N·4Ψ gathered + (N-1)/N·4Ψ "
      "reduce-scattered (+ another (N-1)/N·4Ψ for FULL_SHARD's re-gather in backward).\n",
      mb(16 * psi), static_cast<long long>(largest), mb(4.0 * static_cast<double>(largest)),
      reset_everywhere ? "" : " (peak reset refused by the kernel: training = whole fit)");

  std::map<std::pair<std::string, int64_t>, const Row*> by;
  for (const auto& r : rows)
    if (r.ok) by[{r.strategy, r.world}] = &r;
  const Row* base = by.count({"DDP", 1}) ? by[{"DDP", 1}] : nullptr;
  std::string ratios;
  char buf[256];
  for (int64_t world : a.worlds) {
    if (world < 2) continue;
    const Row* fs = by.count({"FULL_SHARD", world}) ? by[{"FULL_SHARD", world}] : nullptr;
    const Row* ddp = by.count({"DDP", world}) ? by[{"DDP", world}] : nullptr;
    if (fs && base) {
      std::snprintf(buf, sizeof buf,
                    "%sFULL_SHARD world %lld / DDP world 1: training growth %.2fx (1/N = %.2f), "
                    "step time %.2fx",
                    ratios.empty() ? "" : "; ", static_cast<long long>(world), fs->train_growth / base->train_growth,
                    1.0 / static_cast<double>(world), fs->step_s / base->step_s);
      ratios += buf;
    }
    if (fs && ddp) {
      std::snprintf(buf, sizeof buf, "%sFULL_SHARD / DDP at world %lld: growth %.2fx, step time %.2fx, sent %.2fx",
                    ratios.empty() ? "" : "; ", static_cast<long long>(world), fs->train_growth / ddp->train_growth,
                    fs->step_s / ddp->step_s, ddp->sent > 0 ? fs->sent / ddp->sent : 0.0);
      ratios += buf;
    }
  }
  if (!ratios.empty()) std::printf("Ratios: %s.\n", ratios.c_str());
  std::printf("Total wall time %.0f s.\n", seconds_since(t_all));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    // Pin glibc's mmap threshold (this also stops its dynamic growth) so freed large tensors are
    // unmapped at once and RSS follows live memory. --glibc-malloc leaves glibc as a user's process
    // has it: freed blocks below its (growing) threshold are kept and reused, which spares page
    // faults (LibTorch's own tensors: activations, autograd's gradients) and keeps RSS above live memory.
    if (!a.glibc_malloc) bench::track_live_memory();
    if (!a.run_strategy.empty()) {
      if (a.out.empty()) throw std::invalid_argument("--run needs --out FILE");
      return run_one(a);
    }
    return run_all(argc, argv, a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_fsdp: error: %s\n", e.what());
    return 1;
  }
}
