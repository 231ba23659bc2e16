// Activation checkpointing (AC) on a single CPU device: the demo Transformer at a size where the
// activations dominate (ninp 256, nhead 4, nhid 1024, 4 encoder + 4 decoder layers, batch 8 x block
// 256, dropout 0.2, AdamW, fp32), AC off vs AC on (policy: TransformerEncoderLayer and
// TransformerDecoderLayer, via TrainerOptions.strategy.activation_checkpointing_policy), side by side
// in one invocation. For each it measures:
//   - median step time over the timed steps (after the warm-up),
//   - peak RSS growth over the training phase: VmHWM (reset at on_train_start) - RSS at on_train_start
//     (activations + gradients + AdamW state + temporaries), and that minus 12Ψ (4Ψ grads + 8Ψ Adam),
//   - per step: the step's peak (VmHWM reset at each batch start) - RSS at the batch start; RSS at a
//     batch start is weights + Adam state (zero_grad sets grads to None), so this is activations +
//     gradients (up to 4Ψ) + backward temporaries,
//   - the activations kept by forward: RSS just before backward - RSS at the batch start (median over
//     timed steps). This is the figure AC reduces and the one the ratio line uses,
// next to an analytic count of what autograd keeps (see expected() below).
//
// Usage: bench_ac [data_dir] [--steps 2] [--warmup 1] [--batch 8] [--block 128] [--vocab 0] [--ninp 256]
//                 [--nhead 4] [--nhid 1024] [--nlayers 4] [--dropout 0.2] [--lr 3e-4]
// (data_dir defaults to ../shared/data/wikitext-2; --vocab 0 = the data's vocabulary.)
//
// How it runs: the process you start runs nothing itself; for each configuration it starts this binary
// again (/proc/self/exe) with "--run off|on --out FILE"; the child appends one result line to FILE and
// the parent prints one markdown table. glibc's mmap threshold is pinned (mallopt) so that freed large
// tensors go back to the OS at once and RSS follows live memory.
#include <malloc.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "volt/demos/language_model.h"
#include "volt/demos/wikitext2_data.h"
#include "volt/distributed/launcher.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string data_dir = "../shared/data/wikitext-2";
  int64_t steps = 2, warmup = 1, batch = 8, block = 128;
  int64_t vocab = 0;  // 0: the data's vocabulary
  int64_t ninp = 256, nhead = 4, nhid = 1024, nlayers = 4;
  double dropout = 0.2, lr = 3e-4;
  std::string run, out;  // internal: the child's configuration ("off" or "on") and result file
};

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
    else if (k == "--dropout")
      a.dropout = std::stod(value());
    else if (k == "--lr")
      a.lr = std::stod(value());
    else if (k == "--run")
      a.run = value();
    else if (k == "--out")
      a.out = value();
    else if (k.rfind("--", 0) == 0)
      throw std::invalid_argument("unknown option " + k);
    else if (!have_dir) {
      a.data_dir = k;
      have_dir = true;
    } else
      throw std::invalid_argument("unexpected argument " + k);
  }
  if (a.steps < 1 || a.warmup < 0 || a.batch < 1 || a.block < 2) throw std::invalid_argument("bad steps/sizes");
  if (!a.run.empty() && a.run != "off" && a.run != "on") throw std::invalid_argument("--run takes off or on");
  return a;
}

using bench::hwm_bytes;
using bench::median;
using bench::reset_peak;
using bench::rss_bytes;

/// Step times and memory of one configuration.
class Probe : public Callback {
 public:
  std::string state_key() const override { return "BenchACProbe"; }
  void on_train_start(Trainer&, LightningModule& m) override {
    params = 0;
    for (const auto& p : m.parameters()) params += p.numel();
    reset_ok = reset_peak();
    base = rss_bytes();
  }
  void on_train_batch_start(Trainer&, LightningModule&, const Batch&, int64_t) override {
    train_peak = std::max(train_peak, hwm_bytes());  // the peak since the last reset, before resetting
    reset_ok = reset_peak() && reset_ok;
    step_start = rss_bytes();
    t0_ = Clock::now();
  }
  void on_before_backward(Trainer&, LightningModule&, const torch::Tensor&) override {
    kept.push_back(rss_bytes() - step_start);
  }
  void on_train_batch_end(Trainer&, LightningModule&, const torch::Tensor&, const Batch&, int64_t) override {
    step.push_back(std::chrono::duration<double>(Clock::now() - t0_).count());
    const double h = hwm_bytes();
    step_peak.push_back(h - step_start);
    train_peak = std::max(train_peak, h);
  }
  void on_train_end(Trainer&, LightningModule&) override { train_peak = std::max(train_peak, hwm_bytes()); }

  std::vector<double> step, kept, step_peak;
  int64_t params = 0;
  double base = 0, step_start = 0, train_peak = 0;
  bool reset_ok = false;

 private:
  Clock::time_point t0_;
};

int run_one(const Args& a) {
  spdlog::set_level(spdlog::level::warn);
  torch::set_num_threads(static_cast<int>(volt::detail::available_cores()));

  demos::WikiText2DataOptions dopt;
  dopt.data_dir = a.data_dir;
  dopt.batch_size = a.batch;
  dopt.block_size = a.block;
  dopt.shuffle = false;
  dopt.val_file = "";
  demos::WikiText2Data data(dopt);

  demos::LanguageModelOptions mopt;
  mopt.vocab_size = a.vocab > 0 ? std::max(a.vocab, data.vocab_size()) : data.vocab_size();
  mopt.ninp = a.ninp;
  mopt.nhead = a.nhead;
  mopt.nhid = a.nhid;
  mopt.nlayers = a.nlayers;
  mopt.dropout = a.dropout;
  mopt.optimizer = "adamw";
  mopt.lr = a.lr;
  auto loader = data.train_loader();

  TrainerOptions t = bench::quiet_trainer_options(a.warmup + a.steps);
  t.accelerator = "cpu";
  t.devices = 1;
  t.strategy = "single_device";
  if (a.run == "on")
    t.strategy.activation_checkpointing_policy.module_types = {"TransformerEncoderLayer", "TransformerDecoderLayer"};

  torch::manual_seed(1);
  demos::LanguageModel model(mopt);
  auto probe = std::make_shared<Probe>();
  Trainer trainer(t, {probe});
  trainer.fit(model, *loader);

  const auto timed = [&](const std::vector<double>& v) {
    return v.size() > static_cast<size_t>(a.warmup) ? std::vector<double>(v.begin() + a.warmup, v.end()) : v;
  };
  std::ofstream out(a.out, std::ios::app);
  out.precision(17);
  out << a.run << ' ' << mopt.vocab_size << ' ' << torch::get_num_threads() << ' ' << probe->params << ' '
      << median(timed(probe->step)) << ' ' << probe->train_peak - probe->base << ' ' << median(timed(probe->step_peak))
      << ' ' << median(timed(probe->kept)) << ' ' << (probe->reset_ok ? 1 : 0) << '\n';
  return out ? 0 : 1;
}

struct Row {
  std::string config;
  int64_t vocab = 0, threads = 0, params = 0;
  double step_s = 0, growth = 0, step_peak = 0, kept = 0;
  int reset_ok = 0;
  bool ok = false;
};

/// What autograd keeps after forward, in fp32 elements, for this implementation (demos/transformer.cpp,
/// LibTorch 1.13 on the CPU: dropout keeps a float mask; matmul on 4-d non-contiguous q/k/v and the
/// transposed attention output copies them; softmax keeps its output; relu_dropout only its output;
/// layer_norm its input plus mean/rstd; a linear its input). N = B*T tokens, E = ninp, F = nhid,
/// S = B*H*T*T scores.
struct Expected {
  double enc = 0, dec = 0, outside = 0, layer_input = 0;  // elements
};
Expected expected(const Args& a, int64_t vocab) {
  const double N = static_cast<double>(a.batch * a.block), E = static_cast<double>(a.ninp),
               F = static_cast<double>(a.nhid), T = static_cast<double>(a.block),
               S = static_cast<double>(a.batch * a.nhead) * T * T, V = static_cast<double>(vocab);
  // Self-attention block: input (packed qkv linear) + q, k, v contiguous copies for the bmms + attention
  // output copy (out_proj input) + out_proj dropout mask + residual sum (norm input) = 7 N·E; scores:
  // softmax output, dropout mask, dropped probabilities (bmm input) = 3 S.
  const double attn_block = 7 * N * E + 3 * S;
  // Feed-forward block: norm output (linear1 input) + dropout mask after linear2 + residual sum (norm
  // input) = 3 N·E; hidden: relu_dropout's output, which is also linear2's input = N·F (relu's output
  // and dropout's mask as well, 3 N·F, before relu_dropout).
  const double ff_block = 3 * N * E + N * F;
  Expected e;
  e.enc = attn_block + ff_block + 2 * 2 * N;  // + mean/rstd of 2 layer norms
  // Cross-attention: norm1 output (q linear input) + q, k, v copies + output copy + dropout mask +
  // residual sum = 7 N·E (memory, the k/v linears' input, is counted once below), 3 S.
  e.dec = attn_block + (7 * N * E + 3 * S) + ff_block + 3 * 2 * N;
  // Outside the layers: 2 positional-encoding dropout masks, encoder final norm input, memory, decoder
  // final norm input and output (head input) = 6 N·E; log_softmax output N·V; final norms' mean/rstd.
  e.outside = 6 * N * E + N * V + 2 * 2 * N;
  e.layer_input = N * E;  // all a checkpointed layer keeps (its input; memory and mask are shared)
  return e;
}

int spawn(char** argv, int argc, const std::string& config, const std::string& out) {
  return volt::bench::spawn_self(argv, argc, {"--run", config, "--out", out});
}

int run_all(int argc, char** argv, const Args& a) {
  char tmpl[] = "/tmp/bench_ac_XXXXXX";
  const int fd = ::mkstemp(tmpl);
  if (fd < 0) throw std::runtime_error("cannot create a temp file");
  ::close(fd);
  const std::string out = tmpl;
  const auto t_all = Clock::now();
  for (const char* c : {"off", "on"}) {
    std::fprintf(stderr, "bench_ac: AC %s ...\n", c);
    const int rc = spawn(argv, argc, c, out);
    if (rc != 0) std::fprintf(stderr, "bench_ac: AC %s failed (exit %d)\n", c, rc);
  }
  Row off, on;
  std::ifstream in(out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    Row r;
    f >> r.config >> r.vocab >> r.threads >> r.params >> r.step_s >> r.growth >> r.step_peak >> r.kept >> r.reset_ok;
    if (!f) continue;
    r.ok = true;
    (r.config == "on" ? on : off) = r;
  }
  std::remove(out.c_str());
  if (!off.ok && !on.ok) {
    std::fprintf(stderr, "bench_ac: no configuration produced results\n");
    return 1;
  }
  const Row& any = off.ok ? off : on;
  const Expected e = expected(a, any.vocab);
  const double L = static_cast<double>(a.nlayers), psi = static_cast<double>(any.params);
  const double exp_off = 4 * (L * (e.enc + e.dec) + e.outside);
  const double exp_on = 4 * (2 * L * e.layer_input + e.outside);
  auto mb = [](double b) { return b / 1e6; };

  std::printf(
      "\nActivation checkpointing on the CPU, single device, demo Transformer (vocab %lld, ninp %lld, nhead "
      "%lld, nhid %lld, %lld+%lld layers, dropout %.2f): Ψ = %lld parameters, AdamW, fp32, batch %lld x block "
      "%lld, median of %lld timed steps after %lld warm-up, %lld threads\n\n",
      static_cast<long long>(any.vocab), static_cast<long long>(a.ninp), static_cast<long long>(a.nhead),
      static_cast<long long>(a.nhid), static_cast<long long>(a.nlayers), static_cast<long long>(a.nlayers), a.dropout,
      static_cast<long long>(any.params), static_cast<long long>(a.batch), static_cast<long long>(a.block),
      static_cast<long long>(a.steps), static_cast<long long>(a.warmup), static_cast<long long>(any.threads));
  std::printf(
      "Expected activations kept by forward (fp32, analytic): per encoder layer %.1f MB, per decoder layer "
      "%.1f MB, x %lld each = %.1f MB; outside the layers (embedding dropout masks, final norms, log_softmax "
      "output N x vocab) %.1f MB; with AC each layer keeps only its input, %.1f MB.\n\n",
      mb(4 * e.enc), mb(4 * e.dec), static_cast<long long>(a.nlayers), mb(4 * L * (e.enc + e.dec)), mb(4 * e.outside),
      mb(4 * e.layer_input));
  std::printf(
      "| AC | step (ms) | peak growth, training (MB) | growth - 12Ψ (MB) | step peak - step-start RSS (MB) | "
      "activations kept by forward, measured (MB) | expected (MB) |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- |\n");
  for (const Row* r : {&off, &on}) {
    const char* name = r == &off ? "off" : "on";
    if (!r->ok) {
      std::printf("| %s | failed | | | | | |\n", name);
      continue;
    }
    std::printf("| %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |\n", name, 1e3 * r->step_s, mb(r->growth),
                mb(r->growth - 12 * psi), mb(r->step_peak), mb(r->kept), mb(r == &off ? exp_off : exp_on));
  }
  std::printf(
      "\nPeak growth: VmHWM over the training phase - RSS at on_train_start (activations + grads 4Ψ + AdamW "
      "state 8Ψ + temporaries)%s. Step peak: VmHWM within a step - RSS at its start (weights and Adam state "
      "resident; activations + grads + backward temporaries). Kept by forward: RSS before backward - RSS at "
      "the step's start.\n",
      off.reset_ok && on.reset_ok ? "" : " (peak reset refused by the kernel: peaks cover the whole process)");
  if (off.ok && on.ok)
    std::printf(
        "Ratios: activation memory (kept by forward) off/on %.2fx (target >= 3x; layers only, without the "
        "%.0f MB outside them: %.2fx), step peak off/on %.2fx, step time on/off %.2fx (target <= 1.4).\n",
        off.kept / on.kept, mb(4 * e.outside), (off.kept - 4 * e.outside) / (on.kept - 4 * e.outside),
        off.step_peak / on.step_peak, on.step_s / off.step_s);
  std::printf("Total wall time %.0f s.\n", std::chrono::duration<double>(Clock::now() - t_all).count());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    // Pin glibc's mmap threshold (this also stops its dynamic growth) so freed large tensors are
    // unmapped at once and RSS follows live memory.
    bench::track_live_memory();
    const Args a = parse(argc, argv);
    if (!a.run.empty()) {
      if (a.out.empty()) throw std::invalid_argument("--run needs --out FILE");
      return run_one(a);
    }
    return run_all(argc, argv, a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ac: error: %s\n", e.what());
    return 1;
  }
}
