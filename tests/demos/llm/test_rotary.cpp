// Rotary embeddings in two kernels (demos/llm/rotary.h) against Hugging Face's formula
// x * cos + rotate_half(x) * sin: values and gradients in float32 and float64 (also through the
// transpose the model applies, and twice), bf16 to its rounding, and the table's shape rules.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "gpu_visibility.h"
#include "volt/core/compat.h"
#include "volt/core/errors.h"
#include "volt/demos/llm/rotary.h"

using volt::demos::apply_rotary;
using volt::demos::rotary_table;

namespace {
torch::Tensor rotate_half(const torch::Tensor& t) {
  const int64_t half = t.size(-1) / 2;
  return torch::cat({-t.narrow(-1, half, half), t.narrow(-1, 0, half)}, -1);
}

/// Hugging Face's tables (cos and sin [T, 1, hd], in x's dtype) and formula on x [B, T, H, hd].
torch::Tensor hf_rotary(const torch::Tensor& x, int64_t start, double theta) {
  const int64_t t = x.size(1), hd = x.size(3);
  const auto inv_freq = 1.0 / torch::pow(theta, torch::arange(0, hd, 2, torch::kLong).to(torch::kFloat) / hd);
  const auto pos = torch::arange(start, start + t, torch::kLong).to(torch::kFloat);
  const auto emb = torch::cat({torch::outer(pos, inv_freq), torch::outer(pos, inv_freq)}, -1);
  const auto cos = emb.cos().to(x.scalar_type()).unsqueeze(1), sin = emb.sin().to(x.scalar_type()).unsqueeze(1);
  return x * cos + rotate_half(x) * sin;
}
}  // namespace

TEST_CASE("Rotary: two kernels equal Hugging Face's formula, forward and backward", "[llm][rotary]") {
  torch::manual_seed(7);
  for (auto dtype : {torch::kFloat, torch::kDouble}) {
    INFO("dtype " << dtype);
    const double tol = dtype == torch::kFloat ? 1e-6 : 1e-13;
    const auto x0 = torch::randn({2, 9, 3, 16}, dtype) * 3;
    const auto rope = rotary_table(5, 9, 16, 500000.0, torch::kCPU, dtype);
    const auto xa = x0.clone().requires_grad_(true), xr = x0.clone().requires_grad_(true);
    const auto got = apply_rotary(xa, rope), want = hf_rotary(xr, 5, 500000.0);
    CHECK(torch::allclose(got, want, tol, tol));
    // A gradient that is not uniform, so that a sign or a half swapped in the backward shows.
    const auto w = torch::randn(x0.sizes(), dtype);
    const auto ga = torch::autograd::grad({(got * w).sum()}, {xa})[0];
    const auto gr = torch::autograd::grad({(want * w).sum()}, {xr})[0];
    CHECK(torch::allclose(ga, gr, tol, tol));
    // Through the model's transpose: the incoming gradient is not contiguous.
    const auto gt =
        torch::autograd::grad({(apply_rotary(xa, rope).transpose(1, 2) * w.transpose(1, 2)).sum()}, {xa})[0];
    CHECK(torch::allclose(gt, gr, tol, tol));
    // The rotation keeps each pair's norm: a rotation, not only something with the right gradient.
    const auto n_in = x0.pow(2).view({2, 9, 3, 2, 8}).sum(3), n_out = got.detach().pow(2).view({2, 9, 3, 2, 8}).sum(3);
    CHECK(torch::allclose(n_in, n_out, 1e-5, 1e-5));
  }
  // Position 0 is the identity.
  const auto x = torch::randn({1, 1, 2, 8});
  CHECK(torch::equal(apply_rotary(x, rotary_table(0, 1, 8, 10000.0, torch::kCPU, torch::kFloat)), x));
}

TEST_CASE("Rotary: a double backward differentiates the rotation's backward", "[llm][rotary]") {
  torch::manual_seed(10);
  const auto x0 = torch::randn({1, 5, 2, 8}, torch::kDouble);
  const auto rope = rotary_table(0, 5, 8, 10000.0, torch::kCPU, torch::kDouble);
  const auto w = torch::randn(x0.sizes(), torch::kDouble);
  // d/dx of |d(sum(R(x)^2 * w))/dx|^2 through volt and through Hugging Face's form.
  auto second = [&](bool volt) {
    const auto x = x0.clone().requires_grad_(true);
    const auto y = volt ? apply_rotary(x, rope) : hf_rotary(x, 0, 10000.0);
    const auto g = torch::autograd::grad({(y.pow(2) * w).sum()}, {x}, {}, true, /*create_graph=*/true)[0];
    return torch::autograd::grad({g.pow(2).sum()}, {x})[0];
  };
  CHECK(torch::allclose(second(true), second(false), 1e-12, 1e-12));
}

TEST_CASE("Rotary: bf16 within its rounding of the float32 formula, and fp32 tables on bf16", "[llm][rotary]") {
  torch::manual_seed(8);
  const auto x = torch::randn({2, 6, 4, 32});
  const auto want = hf_rotary(x, 0, 10000.0);
  const auto got = apply_rotary(x.to(torch::kBFloat16), rotary_table(0, 6, 32, 10000.0, torch::kCPU, torch::kBFloat16));
  CHECK(got.scalar_type() == torch::kBFloat16);
  CHECK(torch::allclose(got.to(torch::kFloat), want, 2e-2, 2e-2));
  // bf16 activations with float32 tables (single-device bf16-mixed, where the residual stream is
  // float32) promote to float32, as Hugging Face's form does; the gradient comes back in bf16.
  const auto xb = x.to(torch::kBFloat16).requires_grad_(true);
  const auto mixed = apply_rotary(xb, rotary_table(0, 6, 32, 10000.0, torch::kCPU, torch::kFloat));
  CHECK(mixed.scalar_type() == torch::kFloat);
  CHECK(torch::allclose(mixed, hf_rotary(x.to(torch::kBFloat16).to(torch::kFloat), 0, 10000.0), 1e-6, 1e-6));
  const auto g = torch::autograd::grad({mixed.sum()}, {xb})[0];
  CHECK(g.scalar_type() == torch::kBFloat16);
  // retain_graph: the backward keeps nothing it consumes, so a second pass gives the same gradient.
  const auto xa = x.clone().requires_grad_(true);
  const auto y = apply_rotary(xa, rotary_table(0, 6, 32, 10000.0, torch::kCPU, torch::kFloat)).pow(2).sum();
  const auto g1 = torch::autograd::grad({y}, {xa}, {}, /*retain_graph=*/true)[0];
  const auto g2 = torch::autograd::grad({y}, {xa})[0];
  CHECK(torch::equal(g1, g2));
}

TEST_CASE("Rotary: tables and inputs of the wrong shape are refused", "[llm][rotary]") {
  const auto rope = rotary_table(0, 4, 8, 10000.0, torch::kCPU, torch::kFloat);
  CHECK(rope.sizes() == torch::IntArrayRef({4, 1, 2, 2, 4}));
  CHECK_THROWS_AS(apply_rotary(torch::randn({1, 5, 2, 8}), rope), volt::DataError);  // 5 positions, 4 rows
  CHECK_THROWS_AS(apply_rotary(torch::randn({1, 4, 8}), rope), volt::DataError);     // not [B, T, H, hd]
  CHECK_THROWS_AS(apply_rotary(torch::randn({1, 4, 2, 8}), rope.squeeze(1)), volt::DataError);
  CHECK_THROWS_AS(apply_rotary(torch::randn({1, 4, 2, 6}), rope), volt::DataError);  // head width 6, table 8
  CHECK_THROWS_WITH(apply_rotary(torch::randn({1, 4, 2, 8}), rope.clone().requires_grad_(true)),
                    Catch::Contains("takes no gradient"));
  CHECK_THROWS_WITH(rotary_table(0, 4, 7, 10000.0, torch::kCPU, torch::kFloat), Catch::Contains("head_dim"));
  CHECK_THROWS_WITH(rotary_table(0, -1, 8, 10000.0, torch::kCPU, torch::kFloat), Catch::Contains(">= 0"));
  CHECK_THROWS_WITH(rotary_table(-2, 4, 8, 10000.0, torch::kCPU, torch::kFloat), Catch::Contains(">= 0"));
  for (double theta : {0.0, 1.0, -5.0, std::nan(""), std::numeric_limits<double>::infinity()})
    CHECK_THROWS_WITH(rotary_table(0, 4, 8, theta, torch::kCPU, torch::kFloat), Catch::Contains("theta"));
  // No positions (an empty batch) is a valid table.
  CHECK(rotary_table(0, 0, 8, 10000.0, torch::kCPU, torch::kFloat).size(0) == 0);
}

TEST_CASE("Rotary on the GPU equals the CPU, in float32 and bf16", "[cuda][llm][rotary]") {
  if (volt::testing::no_cuda()) return;
  torch::manual_seed(9);
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    INFO("dtype " << dtype);
    const double tol = dtype == torch::kFloat ? 1e-5 : 2e-2;
    const auto x = torch::randn({2, 16, 4, 64}).to(dtype);
    const auto rc = rotary_table(3, 16, 64, 10000.0, torch::kCPU, dtype);
    const auto rg = rotary_table(3, 16, 64, 10000.0, torch::kCUDA, dtype);
    const auto xc = x.clone().requires_grad_(true), xg = x.cuda().requires_grad_(true);
    const auto yc = apply_rotary(xc, rc), yg = apply_rotary(xg, rg);
    CHECK(torch::allclose(yg.cpu().to(torch::kFloat), yc.to(torch::kFloat), tol, tol));
    const auto w = torch::randn(x.sizes()).to(dtype);
    const auto gc = torch::autograd::grad({(yc * w).sum()}, {xc})[0];
    const auto gg = torch::autograd::grad({(yg * w.cuda()).sum()}, {xg})[0];
    CHECK(torch::allclose(gg.cpu().to(torch::kFloat), gc.to(torch::kFloat), tol, tol));
  }
}

TEST_CASE("Rotary on CUDA: the compiled kernel equals the two-kernel form to rounding, forward and backward",
          "[cuda][llm][rotary]") {
  if (volt::testing::no_cuda()) return;
  torch::manual_seed(13);
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    INFO("dtype " << dtype);
    const auto x = (torch::randn({3, 24, 4, 64}) * 2).to(dtype).cuda();
    const auto rope = rotary_table(7, 24, 64, 500000.0, torch::kCUDA, dtype);
    const bool fused = volt::demos::rotary_kernel_works(x, rope);
    CHECK(fused == volt::compat::kJitElementwise);
    // Through the model's transpose, so that the incoming gradient is not contiguous.
    const auto w = torch::randn({3, 4, 24, 64}).to(dtype).cuda();
    auto run = [&](bool f) {
      const auto xi = x.clone().requires_grad_(true);
      const auto y = apply_rotary(xi, rope, f);
      const auto g = torch::autograd::grad({(y.transpose(1, 2) * w).sum()}, {xi})[0];
      return std::make_pair(y.detach(), g);
    };
    const auto [y_fused, g_fused] = run(fused);
    const auto [y_two, g_two] = run(false);
    CHECK(y_fused.sizes() == x.sizes());
    CHECK(g_fused.sizes() == x.sizes());
    // Against float64 on the CPU: the compiled kernel rounds once, the two-kernel form twice.
    const auto d = [](const torch::Tensor& t) { return t.to(torch::kCPU, torch::kDouble); };
    const auto xr = d(x).requires_grad_(true);
    const auto yr = apply_rotary(xr, rotary_table(7, 24, 64, 500000.0, torch::kCPU, torch::kDouble));
    const auto gr = torch::autograd::grad({(yr.transpose(1, 2) * d(w)).sum()}, {xr})[0];
    const double tol = dtype == torch::kFloat ? 1e-5 : 5e-2;
    CHECK(torch::allclose(d(y_fused), yr.detach(), tol, tol));
    CHECK(torch::allclose(d(g_fused), gr, tol, tol));
    const double slack = dtype == torch::kFloat ? 1e-6 : 1e-2;
    CHECK((d(y_fused) - yr.detach()).abs().max().item<double>() <=
          (d(y_two) - yr.detach()).abs().max().item<double>() + slack);
    CHECK((d(g_fused) - gr).abs().max().item<double>() <= (d(g_two) - gr).abs().max().item<double>() + slack);
  }
}

TEST_CASE("Rotary: `fused` is ignored off CUDA", "[llm][rotary]") {
  const auto x = torch::randn({2, 4, 2, 8});
  const auto rope = rotary_table(0, 4, 8, 10000.0, torch::kCPU, torch::kFloat);
  CHECK_FALSE(volt::demos::rotary_kernel_works(x, rope));
  CHECK(torch::equal(apply_rotary(x, rope, /*fused=*/true), apply_rotary(x, rope)));
}
