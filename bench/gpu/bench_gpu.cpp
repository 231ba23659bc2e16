// volt on the GPU: the demo Transformer (by default the 1B configuration) in bf16-mixed, timed the
// same way as bench/gpu/lightning_fsdp.py times Lightning (median step over the timed steps, host
// clock after a device synchronize). Appends one JSON line per run to OUT_JSON.
// usage: bench_gpu DATA_DIR OUT_JSON VARIANT [--ninp 1024 --nhead 64 --nhid 4096 --nlayers 32
//        --batch 8 --block 256 --steps 30 --warmup 5]
// VARIANT: fsdp | fsdp_ac | fsdp_offload | fsdp_fp16 (16-mixed) | ddp | single
#include <spdlog/spdlog.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>

#include "volt/core/compat.h"
#include "volt/demos/language_model.h"
#include "volt/demos/wikitext2_data.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using Clock = std::chrono::steady_clock;

namespace {
struct StepTimer : Callback {
  explicit StepTimer(int64_t warmup) : warmup(warmup) {}
  std::string state_key() const override { return "StepTimer"; }
  void on_train_batch_start(Trainer&, LightningModule&, const Batch&, int64_t) override {
    torch::cuda::synchronize();
    t0 = Clock::now();
  }
  void on_train_batch_end(Trainer&, LightningModule&, const torch::Tensor&, const Batch&, int64_t i) override {
    torch::cuda::synchronize();
    if (i >= warmup) times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  int64_t warmup;
  Clock::time_point t0;
  std::vector<double> times;
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
  const std::string dir = argv[1], out = argv[2], variant = argv[3];
  std::map<std::string, int64_t> a = {{"ninp", 1024}, {"nhead", 64},  {"nhid", 4096}, {"nlayers", 32},
                                      {"batch", 8},   {"block", 256}, {"steps", 30},  {"warmup", 5}};
  for (int i = 4; i + 1 < argc; i += 2) a[std::string(argv[i]).substr(2)] = std::stoll(argv[i + 1]);
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
  t.max_steps = a["warmup"] + a["steps"];
  t.enable_progress_bar = false;
  t.enable_model_summary = false;
  t.enable_checkpointing = false;
  t.num_sanity_val_steps = 0;
  t.logger = false;
  t.seed = 42;
  const ModulePolicy layers{{"TransformerEncoderLayer", "TransformerDecoderLayer"}, 0, nullptr};
  if (variant.rfind("fsdp", 0) == 0) {
    t.strategy = "fsdp";
    t.strategy.fsdp.auto_wrap_policy = layers;
    if (variant == "fsdp_ac") t.strategy.fsdp.activation_checkpointing_policy = layers;
    if (variant == "fsdp_offload") t.strategy.fsdp.cpu_offload = true;
    if (variant == "fsdp_fp16") t.precision = "16-mixed";  // with the sharded gradient scaler
  } else if (variant == "ddp") {
    t.strategy = "ddp";
  } else if (variant == "single") {
    t.strategy = "single_device";
  } else {
    std::fprintf(stderr, "bench_gpu: unknown variant '%s'\n", variant.c_str());
    return 2;
  }
  compat::cuda_reset_peak(0);
  auto timer = std::make_shared<StepTimer>(a["warmup"]);
  demos::LanguageModel model(mopt);
  {
    Trainer trainer(t, {timer});
    auto loader = data.train_loader();
    trainer.fit(model, *loader);
  }
  int64_t n_params = 0;
  for (const auto& p : model.parameters()) n_params += p.numel();
  std::sort(timer->times.begin(), timer->times.end());
  const double step = timer->times.empty() ? 0 : timer->times[timer->times.size() / 2];
  const double tokens = static_cast<double>(a["batch"] * a["block"]);
  const double flops = 6.0 * static_cast<double>(n_params) * tokens;
  char row[1024];
  std::snprintf(row, sizeof row,
                "{\"framework\": \"volt\", \"strategy\": \"%s\", \"params\": %lld, \"batch\": %lld, \"block\": %lld, "
                "\"step_ms\": %.3f, \"tokens_per_s\": %.1f, \"peak_alloc_mb\": %.1f, \"peak_reserved_mb\": %.1f, "
                "\"tflops\": %.2f, \"matmul_tflops\": %.1f, \"mfu\": %.4f}",
                variant.c_str(), static_cast<long long>(n_params), static_cast<long long>(a["batch"]),
                static_cast<long long>(a["block"]), step * 1e3, tokens / step,
                compat::cuda_peak_allocated(0) / 1048576.0, compat::cuda_peak_reserved(0) / 1048576.0,
                flops / step / 1e12, peak_rate, flops / step / 1e12 / peak_rate);
  std::printf("%s\n", row);
  std::ofstream(out, std::ios::app) << row << "\n";
  return 0;
}
