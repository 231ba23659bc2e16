// SwiGLU as one autograd node (demos/llm/swiglu.h) against the two-op form torch::silu(gate) * up:
// bit for bit on the CPU (values and both gradients, float32 and bf16), a double backward, the
// graph it keeps, and on CUDA the runtime-compiled kernels to rounding and the memory they save.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "gpu_visibility.h"
#include "volt/core/compat.h"
#include "volt/demos/llm/llama.h"
#include "volt/demos/llm/swiglu.h"

using volt::demos::swiglu;

namespace {
struct Result {
  torch::Tensor out, grad_gate, grad_up;
};

/// Forward and both input gradients of `f` for a non-uniform incoming gradient `w`.
template <class F>
Result run(F f, const torch::Tensor& gate0, const torch::Tensor& up0, const torch::Tensor& w) {
  const auto gate = gate0.clone().requires_grad_(true), up = up0.clone().requires_grad_(true);
  const auto out = f(gate, up);
  out.backward(w);
  return {out.detach(), gate.grad(), up.grad()};
}

torch::Tensor two_ops(const torch::Tensor& gate, const torch::Tensor& up) { return torch::silu(gate) * up; }

/// Values that reach silu's saturated ends as well as its middle.
torch::Tensor inputs(std::vector<int64_t> shape, torch::Dtype dtype) { return (torch::randn(shape) * 4).to(dtype); }
}  // namespace

TEST_CASE("SwiGLU on the CPU equals silu(gate) * up bit for bit, forward and backward", "[llm][swiglu]") {
  torch::manual_seed(11);
  for (auto dtype : {torch::kFloat, torch::kBFloat16, torch::kDouble}) {
    INFO("dtype " << dtype);
    const auto gate = inputs({3, 7, 40}, dtype), up = inputs({3, 7, 40}, dtype), w = inputs({3, 7, 40}, dtype);
    const auto got = run([](auto& g, auto& u) { return swiglu(g, u); }, gate, up, w);
    const auto want = run(two_ops, gate, up, w);
    CHECK(got.out.scalar_type() == dtype);
    CHECK(torch::equal(got.out, want.out));
    CHECK(torch::equal(got.grad_gate, want.grad_gate));
    CHECK(torch::equal(got.grad_up, want.grad_up));
  }
  // Only one input needing a gradient, and a non-contiguous incoming gradient (through a transpose).
  const auto gate = inputs({5, 6}, torch::kFloat), up = inputs({5, 6}, torch::kFloat);
  const auto g1 = gate.clone().requires_grad_(true), g2 = gate.clone().requires_grad_(true);
  const auto w = inputs({6, 5}, torch::kFloat);
  (swiglu(g1, up).t() * w).sum().backward();
  (two_ops(g2, up).t() * w).sum().backward();
  CHECK(torch::equal(g1.grad(), g2.grad()));
}

TEST_CASE("SwiGLU keeps gate and up only, and mismatched inputs take the two-op form", "[llm][swiglu]") {
  const auto gate = torch::randn({4, 8}, torch::requires_grad()), up = torch::randn({4, 8}, torch::requires_grad());
  const auto out = swiglu(gate, up);
  // One node with edges to both inputs' accumulators; the two-op form has MulBackward0 over
  // SiluBackward0, which keeps silu's output.
  REQUIRE(out.grad_fn() != nullptr);
  CHECK(out.grad_fn()->name().find("SwiGLU") != std::string::npos);
  CHECK(out.grad_fn()->num_inputs() == 1);
  const auto& edges = out.grad_fn()->next_edges();
  REQUIRE(edges.size() >= 2);
  CHECK(edges[0].function == torch::autograd::impl::gradient_edge(gate).function);
  CHECK(edges[1].function == torch::autograd::impl::gradient_edge(up).function);
  // Broadcasting and mixed dtypes are left to ATen's promotion rules.
  const auto row = torch::randn({1, 8});
  CHECK(torch::equal(swiglu(gate.detach(), row), two_ops(gate.detach(), row)));
  const auto wide_up = up.detach().to(torch::kDouble);
  CHECK(torch::equal(swiglu(gate.detach(), wide_up), two_ops(gate.detach(), wide_up)));
  // Without CUDA tensors the kernels are not used, whatever `fused` says.
  CHECK_FALSE(volt::demos::swiglu_kernels_work(gate, up));
  CHECK(torch::equal(swiglu(gate.detach(), up.detach(), /*fused=*/true), two_ops(gate.detach(), up.detach())));
}

TEST_CASE("SwiGLU: a double backward (create_graph) equals the two-op form's", "[llm][swiglu]") {
  torch::manual_seed(5);
  const auto g0 = torch::randn({6, 10}, torch::kDouble) * 3, u0 = torch::randn({6, 10}, torch::kDouble);
  const auto w = torch::randn({6, 10}, torch::kDouble);
  auto second = [&](auto f) {
    const auto g = g0.clone().requires_grad_(true), u = u0.clone().requires_grad_(true);
    const auto grads = torch::autograd::grad({(f(g, u) * w).sum()}, {g, u}, {}, true, /*create_graph=*/true);
    // A scalar of both first gradients, differentiated again.
    const auto z = (grads[0] * grads[0]).sum() + (grads[1] * g).sum();
    return torch::autograd::grad({z}, {g, u});
  };
  const auto got = second([](auto& g, auto& u) { return swiglu(g, u); });
  const auto want = second(two_ops);
  CHECK(torch::allclose(got[0], want[0], 1e-12, 1e-12));
  CHECK(torch::allclose(got[1], want[1], 1e-12, 1e-12));
}

TEST_CASE("SwiGLU on CUDA: the compiled kernels equal the two-op form to rounding and keep less memory",
          "[cuda][llm][swiglu]") {
  if (volt::testing::no_cuda()) return;
  torch::manual_seed(3);
  const auto dev = torch::Device(torch::kCUDA, 0);
  if (!volt::compat::kJitElementwise) WARN("this build has no runtime-compiled kernels: the ATen form is checked");
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    INFO("dtype " << dtype);
    const auto gate = inputs({4, 33, 96}, dtype).to(dev), up = inputs({4, 33, 96}, dtype).to(dev);
    const auto w = inputs({4, 33, 96}, dtype).to(dev);
    const bool fused = volt::demos::swiglu_kernels_work(gate, up);
    CHECK(fused == volt::compat::kJitElementwise);
    const auto got = run([&](auto& g, auto& u) { return swiglu(g, u, fused); }, gate, up, w);
    CHECK(got.out.scalar_type() == dtype);
    // The reference in float64 on the CPU; the compiled kernels round once, the two-op form more.
    const auto d = [](const torch::Tensor& t) { return t.to(torch::kCPU, torch::kDouble); };
    const auto ref = run(two_ops, d(gate), d(up), d(w));
    const auto two = run(two_ops, gate, up, w);
    const double tol = dtype == torch::kFloat ? 1e-5 : 1e-2;
    for (auto [a, b, c] :
         {std::tuple{got.out, two.out, ref.out}, std::tuple{got.grad_gate, two.grad_gate, ref.grad_gate},
          std::tuple{got.grad_up, two.grad_up, ref.grad_up}}) {
      CHECK(torch::allclose(d(a), c, tol, tol));
      // No worse than the two-op form against float64 (up to one unit of rounding per element).
      const double err_got = (d(a) - c).abs().max().item<double>(), err_two = (d(b) - c).abs().max().item<double>();
      CHECK(err_got <= err_two * 1.01 + (dtype == torch::kFloat ? 1e-6 : 4e-3));
    }
  }
  // Memory kept between forward and backward: one tensor of the hidden width less than the two-op
  // form (silu's output).
  const auto gate = torch::randn({64, 1024}, torch::TensorOptions(dev).dtype(torch::kBFloat16)).requires_grad_(true);
  const auto up = torch::randn({64, 1024}, torch::TensorOptions(dev).dtype(torch::kBFloat16)).requires_grad_(true);
  const int64_t bytes = gate.numel() * 2;
  auto kept = [&](auto f) {
    torch::cuda::synchronize();
    const int64_t before = volt::compat::cuda_memory_stats(0).allocated;
    auto out = f(gate, up);
    torch::cuda::synchronize();
    const int64_t after = volt::compat::cuda_memory_stats(0).allocated;
    out.backward(torch::ones_like(out));
    gate.mutable_grad().reset();
    up.mutable_grad().reset();
    return after - before;
  };
  const int64_t fused_kept = kept([&](auto& g, auto& u) { return swiglu(g, u, volt::compat::kJitElementwise); });
  const int64_t two_kept = kept(two_ops);
  CHECK(two_kept - fused_kept >= bytes);
}

TEST_CASE("LlamaMLP on CUDA checks the compiled kernels once and trains with them", "[cuda][llm][swiglu]") {
  if (volt::testing::no_cuda()) return;
  torch::manual_seed(9);
  auto mlp = std::make_shared<volt::demos::LlamaMLP>(32, 96);
  auto ref = std::make_shared<volt::demos::LlamaMLP>(32, 96);
  for (size_t i = 0; i < mlp->parameters().size(); ++i) ref->parameters()[i].data().copy_(mlp->parameters()[i]);
  mlp->to(torch::kCUDA);
  const auto x = torch::randn({2, 5, 32});
  const auto y = mlp->forward(x.cuda());
  const auto yr = ref->forward(x);
  CHECK(torch::allclose(y.cpu(), yr, 1e-5, 1e-5));
  y.pow(2).sum().backward();
  yr.pow(2).sum().backward();
  for (size_t i = 0; i < mlp->parameters().size(); ++i)
    CHECK(torch::allclose(mlp->parameters()[i].grad().cpu(), ref->parameters()[i].grad(), 1e-4, 1e-4));
}
