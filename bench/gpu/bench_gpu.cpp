// volt on the GPU: the demo Transformer (by default the 1B configuration) in bf16-mixed, timed the
// same way as bench/gpu/lightning_fsdp.py times Lightning (median step over the timed steps, host
// clock after a device synchronize). Appends one JSON line per run to OUT_JSON.
// usage: bench_gpu DATA_DIR OUT_JSON VARIANT [--ninp 1024 --nhead 64 --nhid 4096 --nlayers 32
//        --batch 8 --block 256 --steps 30 --warmup 5 --in_backward 0 --cuda_graph 0 --profile 0]
//        With --llm 1, the LLM workload's Llama decoder (demos/llm/) on random tokens instead, shaped by
//        [--hidden 2048 --layers 16 --heads 16 --kv_heads 8 --ffn 8192 --vocab 32000 --tied 0]
//        (configs/llm/1b.yaml; bench/gpu/lightning_llm.py trains the same model in Lightning).
// VARIANT: fsdp | fsdp_ac | fsdp_acN (every N-th layer checkpointed: every_n_modules) | fsdp_offload | fsdp_fp16
// (16-mixed) | ddp | single, each fsdp one also with "+oib" (or --in_backward 1): FSDP's optimizer_in_backward (the
// row's strategy keeps "+oib"); ddp and single also with "+graph" (or --cuda_graph 1): trainer.cuda_graph. --profile N
// runs N more steps after the timed ones under LibTorch's profiler and prints where their time went.
//
// Parameters are counted by shape when training starts (FSDP has sharded them by then and frees
// them after fit); FLOPs per token as torchtitan counts them (profiler/model_flops.h: 6 per
// non-embedding parameter plus attention's 12 * layers * heads * head_dim * block, where the
// encoder-decoder's layers are 3 * nlayers attention blocks). Host memory: the exact-size host
// buffers (core/host_buffers.h: offloaded shards and gradients) and the optimizer state against the
// fp32 state (16 bytes a parameter), and the peak RSS against the same. Device memory: the run's
// peak, and the peak of each phase of a step (PhasePeaks: peak_forward_mb, peak_backward_mb, ...).
#include <spdlog/spdlog.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include "volt/core/compat.h"
#include "volt/core/host_buffers.h"
#include "volt/demos/language_model.h"
#include "volt/demos/llm/llama_lm.h"
#include "volt/demos/wikitext2_data.h"
#include "volt/optim/fused_adam.h"
#include "volt/profiler/model_flops.h"
#include "volt/profiler/op_summary.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using Clock = std::chrono::steady_clock;

namespace {
struct StepTimer : Callback {
  StepTimer(int64_t warmup, int64_t steps) : warmup(warmup), end(warmup + steps) {}
  std::string state_key() const override { return "StepTimer"; }
  // By shape, once the model is built and set up (configure_model; FSDP has sharded it by now and
  // gives it back as empty tensors after fit).
  void on_train_start(Trainer&, LightningModule& m) override { params = count_parameters(m); }
  void on_train_batch_start(Trainer&, LightningModule&, const Batch&, int64_t) override {
    torch::cuda::synchronize();
    t0 = Clock::now();
  }
  void on_train_batch_end(Trainer&, LightningModule&, const torch::Tensor&, const Batch&, int64_t i) override {
    torch::cuda::synchronize();
    if (i >= warmup && i < end) times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  int64_t warmup, end;
  Clock::time_point t0;
  std::vector<double> times;
  ParameterCount params;
};

/// With --profile N: the N steps after the timed ones under LibTorch's profiler (profiler/op_summary.h),
/// whose table goes to stdout and PATH.txt, and the Chrome trace to PATH.json (with Kineto).
struct ProfileSteps : Callback {
  ProfileSteps(int64_t first, int64_t n, std::string path) : first(first), n(n), path(std::move(path)) {}
  std::string state_key() const override { return "ProfileSteps"; }
  void on_train_batch_start(Trainer&, LightningModule&, const Batch&, int64_t i) override {
    if (i != first) return;
    torch::cuda::synchronize();
    summary.start(/*cuda=*/true);
  }
  void on_train_batch_end(Trainer&, LightningModule&, const torch::Tensor&, const Batch&, int64_t i) override {
    if (i != first + n - 1 || !summary.running()) return;
    torch::cuda::synchronize();
    const bool trace = summary.stop(path + ".json");
    const std::string table = summary.table(25, n);
    std::printf("%s%s\n", table.c_str(), trace ? ("trace: " + path + ".json").c_str() : "no trace (no Kineto)");
    std::ofstream(path + ".txt") << table;
  }
  int64_t first, n;
  std::string path;
  OpSummary summary;
};

/// Where the device memory peaks: the peak allocated bytes of each phase, over every step. A phase
/// is named by the hook that ends it: set-up (until training starts), forward (batch start to
/// on_before_backward), backward (to on_after_backward: optimizer_in_backward's steps run here) and
/// after backward (the optimizer step, zero_grad, logging, the next batch's transfer, until the next
/// batch starts; after the last, teardown too). The bench has no validation, accumulation or manual
/// optimization, which would blur these names. The allocator's peak is reset as each phase begins,
/// so the run's peak is the largest of them.
struct PhasePeaks : Callback {
  enum Phase { Setup, Forward, Backward, AfterBackward, kPhases };
  static constexpr const char* kNames[kPhases] = {"setup", "forward", "backward", "after_backward"};
  std::string state_key() const override { return "PhasePeaks"; }
  void on_train_start(Trainer&, LightningModule&) override { close(Setup); }
  void on_train_batch_start(Trainer&, LightningModule&, const Batch&, int64_t) override { close(AfterBackward); }
  void on_before_backward(Trainer&, LightningModule&, const torch::Tensor&) override { close(Forward); }
  void on_after_backward(Trainer&, LightningModule&) override { close(Backward); }
  /// Ends phase p: its peak so far is kept, and the allocator's peak starts again from what is allocated now.
  void close(Phase p) {
    allocated[p] = std::max(allocated[p], compat::cuda_peak_allocated(0));
    reserved = std::max(reserved, compat::cuda_peak_reserved(0));
    compat::cuda_reset_peak(0);
  }
  int64_t peak() const { return *std::max_element(allocated, allocated + kPhases); }
  int64_t allocated[kPhases] = {0, 0, 0, 0};
  int64_t reserved = 0;
};

/// Peak resident memory of this process (VmHWM), in bytes.
int64_t peak_rss_bytes() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return 0;
}

/// Token windows of a seeded generator (sample i depends on i only): the LLM rows need no tokenizer.
class RandomTokens : public Dataset {
 public:
  RandomTokens(int64_t n, int64_t block, int64_t vocab) : n_(n), block_(block), vocab_(vocab) {}
  int64_t size() const override { return n_; }
  Batch get(int64_t i) const override {
    auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(i) + 1);
    auto w = torch::randint(vocab_, {block_ + 1}, gen, torch::kLong);
    return Batch{}.set("input_ids", w.narrow(0, 0, block_)).set("labels", w.narrow(0, 1, block_));
  }

 private:
  int64_t n_, block_, vocab_;
};

double matmul_tflops() {
  auto o = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  auto a = torch::randn({8192, 8192}, o), b = torch::randn({8192, 8192}, o);
  for (int i = 0; i < 3; ++i) torch::mm(a, b);
  torch::cuda::synchronize();
  auto t = Clock::now();
  const int n = 10;
  for (int i = 0; i < n; ++i) torch::mm(a, b);
  torch::cuda::synchronize();
  return 2.0 * 8192.0 * 8192.0 * 8192.0 * n / std::chrono::duration<double>(Clock::now() - t).count() / 1e12;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: bench_gpu DATA_DIR OUT_JSON VARIANT [--key value ...]\n");
    return 2;
  }
  const std::string dir = argv[1], out = argv[2];
  std::string variant = argv[3];
  std::map<std::string, int64_t> a = {
      {"ninp", 1024}, {"nhead", 64},   {"nhid", 4096},     {"nlayers", 32},  {"batch", 8},     {"block", 256},
      {"steps", 30},  {"warmup", 5},   {"in_backward", 0}, {"llm", 0},       {"hidden", 2048}, {"layers", 16},
      {"heads", 16},  {"kv_heads", 8}, {"ffn", 8192},      {"vocab", 32000}, {"tied", 0},      {"cuda_graph", 0}};
  for (int i = 4; i + 1 < argc; i += 2) a[std::string(argv[i]).substr(2)] = std::stoll(argv[i + 1]);
  // Suffixes: "fsdp_offload+oib" is the variant with optimizer_in_backward (as --in_backward 1);
  // "ddp+graph" the variant with trainer.cuda_graph (as --cuda_graph 1).
  for (const auto& [suffix, key] :
       {std::pair<std::string, std::string>{"+graph", "cuda_graph"}, {"+oib", "in_backward"}})
    if (variant.size() > suffix.size() && variant.compare(variant.size() - suffix.size(), suffix.size(), suffix) == 0) {
      variant.resize(variant.size() - suffix.size());
      a[key] = 1;
    }
  spdlog::set_level(spdlog::level::warn);
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "bench_gpu: no CUDA device\n");
    return 2;
  }
  const double peak_rate = matmul_tflops();

  demos::WikiText2DataOptions dopt;
  dopt.data_dir = dir;
  dopt.train_file = "valid.txt";
  dopt.val_file = "";
  dopt.shuffle = false;
  dopt.block_size = a["block"];
  dopt.batch_size = a["batch"];
  demos::WikiText2Data data(dopt);
  demos::LanguageModelOptions mopt;  // vocab_size stays Lightning's 33278, as in the Python run
  mopt.ninp = a["ninp"];
  mopt.nhead = a["nhead"];
  mopt.nhid = a["nhid"];
  mopt.nlayers = a["nlayers"];
  mopt.dropout = 0.2;
  mopt.optimizer = "adamw";
  mopt.lr = 1e-4;

  TrainerOptions t;
  t.accelerator = "cuda";
  t.devices = 1;
  t.precision = "bf16-mixed";
  t.max_steps = a["warmup"] + a["steps"] + a["profile"];
  t.enable_progress_bar = false;
  t.enable_model_summary = false;
  t.enable_checkpointing = false;
  t.num_sanity_val_steps = 0;
  t.logger = false;
  t.seed = 42;
  t.cuda_graph = a["cuda_graph"] != 0;
  const bool llm = a["llm"] != 0;
  if (llm) t.gradient_clip_val = 1.0;  // the LLM recipe, as bench/gpu/lightning_llm.py clips
  const ModulePolicy layers = llm ? ModulePolicy{{"LlamaDecoderLayer"}, 0, nullptr}
                                  : ModulePolicy{{"TransformerEncoderLayer", "TransformerDecoderLayer"}, 0, nullptr};
  if (variant.rfind("fsdp", 0) == 0) {
    t.strategy = "fsdp";
    t.strategy.fsdp.auto_wrap_policy = layers;
    if (variant.rfind("fsdp_ac", 0) == 0) {  // "fsdp_ac": every layer; "fsdp_ac3": every 3rd
      t.strategy.fsdp.activation_checkpointing_policy = layers;
      const std::string n = variant.substr(7);
      if (!n.empty()) {
        if (n.size() > 3 || !std::all_of(n.begin(), n.end(), ::isdigit)) {
          std::fprintf(stderr, "bench_gpu: unknown variant '%s'\n", variant.c_str());
          return 2;
        }
        t.strategy.fsdp.activation_checkpointing_policy.every_n_modules = std::stoll(n);
      }
    }
    if (variant == "fsdp_offload") t.strategy.fsdp.cpu_offload = true;
    if (variant == "fsdp_fp16") t.precision = "16-mixed";  // with the sharded gradient scaler
    t.strategy.fsdp.optimizer_in_backward = a["in_backward"] != 0;
  } else if (variant == "ddp") {
    t.strategy = "ddp";
  } else if (variant == "single") {
    t.strategy = "single_device";
  } else {
    std::fprintf(stderr, "bench_gpu: unknown variant '%s'\n", variant.c_str());
    return 2;
  }
  compat::cuda_reset_peak(0);
  auto timer = std::make_shared<StepTimer>(a["warmup"], a["steps"]);
  auto peaks = std::make_shared<PhasePeaks>();
  std::vector<std::shared_ptr<Callback>> callbacks{timer, peaks};
  if (a["profile"] > 0)
    callbacks.push_back(std::make_shared<ProfileSteps>(
        a["warmup"] + a["steps"], a["profile"],
        out + ".profile-" + variant + (t.cuda_graph ? "+graph" : "") + (llm ? "-llm" : "")));
  demos::LlamaLMOptions lopt;
  lopt.vocab_size = a["vocab"];
  lopt.hidden_size = a["hidden"];
  lopt.num_hidden_layers = a["layers"];
  lopt.num_attention_heads = a["heads"];
  lopt.num_key_value_heads = a["kv_heads"];
  lopt.intermediate_size = a["ffn"];
  lopt.max_position_embeddings = std::max<int64_t>(a["block"], 2048);
  lopt.tie_word_embeddings = a["tied"] != 0;
  lopt.lr = 1e-4;
  std::unique_ptr<LightningModule> model;
  if (llm)
    model = std::make_unique<demos::LlamaLM>(lopt);
  else
    model = std::make_unique<demos::LanguageModel>(mopt);
  HostBufferStats host;
  int64_t optimizer_state_bytes = 0;
  {
    Trainer trainer(t, callbacks);
    DataLoaderOptions lo;
    lo.batch_size = a["batch"];
    auto loader = llm ? std::make_shared<DataLoader>(
                            std::make_shared<RandomTokens>(a["batch"] * t.max_steps, a["block"], a["vocab"]), lo)
                      : data.train_loader();
    trainer.fit(*model, *loader);
    peaks->close(PhasePeaks::AfterBackward);
    host = host_buffer_stats();
    if (trainer.optimizer()) optimizer_state_bytes = adam_state_bytes(*trainer.optimizer());
  }
  const int64_t n_params = timer->params.total;
  std::sort(timer->times.begin(), timer->times.end());
  const double step = timer->times.empty() ? 0 : timer->times[timer->times.size() / 2];
  const double tokens = static_cast<double>(a["batch"] * a["block"]);
  const double per_token = llm ? flops_per_token(timer->params.non_embedding(), a["layers"], a["heads"],
                                                 a["hidden"] / a["heads"], a["block"])
                               : flops_per_token(timer->params.non_embedding(), 3 * a["nlayers"], a["nhead"],
                                                 a["ninp"] / a["nhead"], a["block"]);
  const double flops = per_token * tokens;
  // fp32 state: weight, gradient and Adam's two moments, 4 bytes each. Offloaded, all of it is on the
  // host: the exact-size buffers (shards, gradients) plus the optimizer state.
  const double state_bytes = 16.0 * static_cast<double>(n_params);
  const bool offload = t.strategy.fsdp.cpu_offload && t.strategy.name == "fsdp";
  const double host_per_state =
      offload ? (static_cast<double>(host.peak_held) + static_cast<double>(optimizer_state_bytes)) / state_bytes : 0;
  const std::string strategy =
      variant + (t.cuda_graph ? "+graph" : "") + (t.strategy.fsdp.optimizer_in_backward ? "+oib" : "");
  std::string phases;  // "peak_forward_mb" etc.: where the peak is (PhasePeaks)
  for (int p = 0; p < PhasePeaks::kPhases; ++p)
    phases += ", \"peak_" + std::string(PhasePeaks::kNames[p]) +
              "_mb\": " + std::to_string(std::lround(peaks->allocated[p] / 1048576.0));
  char row[2048];
  std::snprintf(row, sizeof row,
                "{\"framework\": \"volt\", \"model\": \"%s\", \"strategy\": \"%s\", \"params\": %lld, "
                "\"params_non_embedding\": %lld, "
                "\"batch\": %lld, \"block\": %lld, \"step_ms\": %.3f, \"tokens_per_s\": %.1f, \"peak_alloc_mb\": %.1f, "
                "\"peak_reserved_mb\": %.1f, \"flops_per_token\": %.6g, \"tflops\": %.2f, \"matmul_tflops\": %.1f, "
                "\"mfu\": %.4f, \"host_requested_mb\": %.1f, \"host_held_mb\": %.1f, \"optimizer_state_mb\": %.1f, "
                "\"host_per_state_byte\": %.4f, \"peak_rss_mb\": %.1f, \"rss_per_state_byte\": %.4f%s}",
                llm ? "llama" : "demo", strategy.c_str(), static_cast<long long>(n_params),
                static_cast<long long>(timer->params.non_embedding()), static_cast<long long>(a["batch"]),
                static_cast<long long>(a["block"]), step * 1e3, tokens / step, peaks->peak() / 1048576.0,
                peaks->reserved / 1048576.0, per_token, flops / step / 1e12, peak_rate, flops / step / 1e12 / peak_rate,
                host.peak_requested / 1048576.0, host.peak_held / 1048576.0, optimizer_state_bytes / 1048576.0,
                host_per_state, peak_rss_bytes() / 1048576.0, static_cast<double>(peak_rss_bytes()) / state_bytes,
                phases.c_str());
  std::printf("%s\n", row);
  std::ofstream(out, std::ios::app) << row << "\n";
  return 0;
}
