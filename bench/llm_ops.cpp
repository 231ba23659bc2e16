// The LLM's elementwise layers, Hugging Face's form against volt's, forward + backward side by side
// in one process: rotary embeddings on q and k (rotate_half, five kernels forward, against
// demos/llm/rotary.h's two), SwiGLU (silu(gate) * up against demos/llm/swiglu.h, with its
// runtime-compiled kernels on a GPU where the build has them) and the loss
// (F.cross_entropy(logits.float()) against demos/llm/token_cross_entropy.h). Prints a table: median ms of forward +
// backward and, on a GPU, the peak memory above what was allocated before (the memory each form needs).
//
// Usage: bench_llm_ops [--device cpu|cuda] [--dtype float|bf16] [--batch 8]
//                      [--block 2048 on cuda, 256 on cpu] [--heads 16] [--kv_heads 8]
//                      [--head_dim 128] [--intermediate 8192] [--vocab 32000] [--steps 10]
//                      [--warmup 3]
// The defaults are the GPU benchmark's Llama (scripts/gpu.sh llm): 8 x 2048 tokens (8 x 256 on the
// CPU, docs/gpu.md's CPU rows), 16 heads of 128, 8 kv heads, intermediate size 8192, vocabulary
// 32,000.
#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bench_util.h"
#include "volt/core/compat.h"
#include "volt/demos/llm/rotary.h"
#include "volt/demos/llm/swiglu.h"
#include "volt/demos/llm/token_cross_entropy.h"

namespace {

struct Args {
  std::string device = "cpu", dtype = "float";
  int64_t batch = 8, block = 0, heads = 16, kv_heads = 8, head_dim = 128, intermediate = 8192, vocab = 32000,
          steps = 10, warmup = 3;
};

Args parse(int argc, char** argv) {
  Args a;
  const std::map<std::string, std::string*> words = {{"--device", &a.device}, {"--dtype", &a.dtype}};
  const std::map<std::string, int64_t*> numbers = {
      {"--batch", &a.batch},       {"--block", &a.block},       {"--heads", &a.heads},
      {"--kv_heads", &a.kv_heads}, {"--head_dim", &a.head_dim}, {"--intermediate", &a.intermediate},
      {"--vocab", &a.vocab},       {"--steps", &a.steps},       {"--warmup", &a.warmup}};
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument("missing value after " + k);
    const std::string v = argv[++i];
    if (auto w = words.find(k); w != words.end()) {
      *w->second = v;
    } else if (auto n = numbers.find(k); n != numbers.end()) {
      size_t used = 0;
      try {
        *n->second = std::stoll(v, &used);
      } catch (const std::exception&) {
      }
      if (used == 0 || used != v.size()) throw std::invalid_argument(k + " takes an integer, got '" + v + "'");
    } else {
      throw std::invalid_argument("unknown option " + k);
    }
  }
  if (a.device != "cpu" && a.device != "cuda") throw std::invalid_argument("--device: cpu or cuda");
  if (a.block == 0) a.block = a.device == "cuda" ? 2048 : 256;
  if (a.dtype != "float" && a.dtype != "bf16") throw std::invalid_argument("--dtype: float or bf16");
  if (a.steps < 1 || a.warmup < 0 || a.head_dim < 2 || a.head_dim % 2 != 0 || a.batch < 1 || a.block < 0 ||
      a.heads < 1 || a.kv_heads < 1 || a.vocab < 1 || a.intermediate < 1)
    throw std::invalid_argument("sizes and --steps must be positive, --warmup >= 0 and --head_dim even");
  return a;
}

torch::Tensor rotate_half(const torch::Tensor& t) {
  const int64_t half = t.size(-1) / 2;
  return torch::cat({-t.narrow(-1, half, half), t.narrow(-1, 0, half)}, -1);
}

struct Row {
  std::string what;
  double ms = 0;
  double peak_mb = 0;
};

/// Median ms of `fn` (forward + backward) and its peak memory above the live bytes before it.
Row measure(const std::string& what, const Args& a, const std::function<void()>& fn) {
  const bool cuda = a.device == "cuda";
  auto sync = [&] {
    if (cuda) torch::cuda::synchronize();
  };
  for (int64_t i = 0; i < a.warmup; ++i) fn();
  sync();
  const auto before = volt::compat::cuda_memory_stats();
  volt::compat::cuda_reset_peak();
  std::vector<double> ms;
  for (int64_t i = 0; i < a.steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    sync();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  const auto after = volt::compat::cuda_memory_stats();
  return {what, volt::bench::median(ms), (after.allocated_peak - before.allocated) / 1048576.0};
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  try {
    a = parse(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_llm_ops: %s\n", e.what());
    return 2;
  }
  if (a.device == "cuda" && !torch::cuda::is_available()) {
    std::fprintf(stderr, "bench_llm_ops: --device cuda but no CUDA device is visible\n");
    return 2;
  }
  torch::manual_seed(0);
  const auto opts = torch::TensorOptions()
                        .device(a.device == "cuda" ? torch::kCUDA : torch::kCPU)
                        .dtype(a.dtype == "bf16" ? torch::kBFloat16 : torch::kFloat);
  const int64_t n = a.batch * a.block;
  // Rotary: q and k as the projections give them, [B, T, H, hd].
  auto q = torch::randn({a.batch, a.block, a.heads, a.head_dim}, opts).requires_grad_(true);
  auto k = torch::randn({a.batch, a.block, a.kv_heads, a.head_dim}, opts).requires_grad_(true);
  const auto gq = torch::randn(q.sizes(), opts), gk = torch::randn(k.sizes(), opts);
  const auto rope =
      volt::demos::rotary_table(0, a.block, a.head_dim, 10000.0, opts.device(), opts.dtype().toScalarType());
  // Hugging Face's tables [T, hd] (rope's first column is [c; s]), applied as the model did: on the
  // transposed [B, H, T, hd].
  const auto c = rope.select(3, 0).select(2, 0), s = rope.select(3, 0).select(2, 1);  // [T, 1, hd/2]
  const auto cos = torch::cat({c, c}, -1).squeeze(1), sin = torch::cat({s, s}, -1).squeeze(1);
  auto clear = [&] {  // each pass writes its gradients afresh, as a training step does
    q.mutable_grad() = torch::Tensor();
    k.mutable_grad() = torch::Tensor();
  };
  std::vector<Row> rows;
  rows.push_back(measure("rotary q+k, Hugging Face (rotate_half)", a, [&] {
    auto qt = q.transpose(1, 2), kt = k.transpose(1, 2);
    auto oq = qt * cos + rotate_half(qt) * sin, ok = kt * cos + rotate_half(kt) * sin;
    torch::autograd::backward({oq, ok}, {gq.transpose(1, 2), gk.transpose(1, 2)});
    clear();
  }));
  const bool rotary_fused = volt::demos::rotary_kernel_works(q, rope);
  rows.push_back(
      measure(rotary_fused ? "rotary q+k, volt (compiled kernel)" : "rotary q+k, volt (two kernels)", a, [&] {
        auto oq = volt::demos::apply_rotary(q, rope, rotary_fused),
             ok = volt::demos::apply_rotary(k, rope, rotary_fused);
        torch::autograd::backward({oq, ok}, {gq, gk});
        clear();
      }));
  q = k = torch::Tensor();
  // SwiGLU on gate and up [N, intermediate] as the projections give them.
  auto gate = torch::randn({n, a.intermediate}, opts).requires_grad_(true);
  auto up = torch::randn({n, a.intermediate}, opts).requires_grad_(true);
  const auto gs = torch::randn(gate.sizes(), opts);
  auto clear_mlp = [&] {
    gate.mutable_grad() = torch::Tensor();
    up.mutable_grad() = torch::Tensor();
  };
  rows.push_back(measure("SwiGLU, Hugging Face (silu(gate) * up)", a, [&] {
    (torch::silu(gate) * up).backward(gs);
    clear_mlp();
  }));
  const bool fused = volt::demos::swiglu_kernels_work(gate, up);
  rows.push_back(measure(fused ? "SwiGLU, volt (compiled kernels)" : "SwiGLU, volt (ATen, inputs kept)", a, [&] {
    volt::demos::swiglu(gate, up, fused).backward(gs);
    clear_mlp();
  }));
  gate = up = torch::Tensor();
  // The loss over logits [N, V] as lm_head gives them.
  auto logits = torch::randn({n, a.vocab}, opts).requires_grad_(true);
  const auto labels = torch::randint(0, a.vocab, {n}, opts.dtype(torch::kLong));
  rows.push_back(measure("loss, F.cross_entropy(logits.float())", a, [&] {
    auto l = torch::nn::functional::cross_entropy(logits.to(torch::kFloat), labels);
    l.backward();
    logits.mutable_grad() = torch::Tensor();
  }));
  rows.push_back(measure("loss, volt token_cross_entropy", a, [&] {
    auto l = volt::demos::token_cross_entropy(logits, labels);
    l.backward();
    logits.mutable_grad() = torch::Tensor();
  }));
  std::printf(
      "\nLLM elementwise layers, forward + backward (%s, %s; %lld x %lld tokens, %lld/%lld heads of %lld, "
      "intermediate size %lld, vocabulary %lld; median of %lld after %lld)\n\n",
      a.device.c_str(), a.dtype.c_str(), static_cast<long long>(a.batch), static_cast<long long>(a.block),
      static_cast<long long>(a.heads), static_cast<long long>(a.kv_heads), static_cast<long long>(a.head_dim),
      static_cast<long long>(a.intermediate), static_cast<long long>(a.vocab), static_cast<long long>(a.steps),
      static_cast<long long>(a.warmup));
  std::printf("| layer, form | ms | vs Hugging Face | peak memory above inputs (MB) |\n| --- | --- | --- | --- |\n");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const Row& base = rows[i - i % 2];
    const std::string peak = a.device == "cuda" ? std::to_string(static_cast<long long>(r.peak_mb)) : "-";
    std::printf("| %s | %.2f | %.2fx | %s |\n", r.what.c_str(), r.ms, base.ms / r.ms, peak.c_str());
  }
  return 0;
}
