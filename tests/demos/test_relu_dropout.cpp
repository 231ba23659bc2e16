// relu_dropout (demos/relu_dropout.h) against torch::dropout(torch::relu(h)): the same outputs
// and random draws, gradients equal bitwise (in float32, float64 and bf16, for dropout
// probabilities whose scale is and is not exact in the dtype, in training and evaluation, and
// when backward records a graph), twice differentiable, and keeping one tensor instead of three.
#include <malloc.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "gpu_visibility.h"
#include "volt/core/compat.h"
#include "volt/core/errors.h"
#include "volt/demos/relu_dropout.h"

using volt::demos::relu_dropout;

namespace {

torch::Tensor composed(const torch::Tensor& h, double p, bool train) {
  return torch::dropout(torch::relu(h), p, train);
}

/// Equal values, where -0 and +0 count as equal (the mask-free backward writes +0 where eager
/// multiplies a negative gradient by a zero mask).
bool same(const torch::Tensor& a, const torch::Tensor& b) { return torch::equal(a + 0.0, b + 0.0); }

/// Outputs and gradients of both forms from the same random state, for a gradient that is not
/// uniform; with `create_graph`, the gradient backward computes when it records a graph.
void check_equal(const torch::Tensor& h0, double p, bool train, bool create_graph = false) {
  const auto w = torch::randn(h0.sizes(), h0.options());
  const auto ha = h0.clone().requires_grad_(true), hb = h0.clone().requires_grad_(true);
  torch::manual_seed(99);
  const auto got = relu_dropout(ha, p, train);
  torch::manual_seed(99);
  const auto want = composed(hb, p, train);
  CHECK(torch::equal(got, want));
  const auto ga = torch::autograd::grad({(got * w).sum()}, {ha}, {}, create_graph, create_graph)[0];
  const auto gb = torch::autograd::grad({(want * w).sum()}, {hb}, {}, create_graph, create_graph)[0];
  CHECK(ga.scalar_type() == h0.scalar_type());
  CHECK(same(ga.detach(), gb.detach()));
}

/// Bytes held after `f`'s forward on a temporary (non-leaf) copy of `leaf`, the way linear1's output
/// reaches the block: a form that kept its input would hold it. `in_use` reads the allocator.
template <class F, class InUse>
int64_t held_after_forward(const torch::Tensor& leaf, F&& f, InUse&& in_use) {
  const int64_t before = in_use();
  torch::Tensor y;
  {
    const auto h = leaf * 1.0;
    y = f(h);
  }
  const int64_t held = in_use() - before;
  y.sum().backward();  // the graph was complete
  return held;
}

/// Bytes malloc hands out now (the main arena and mmapped blocks; tests run on the main thread).
int64_t malloc_in_use() {
  const auto m = ::mallinfo2();
  return static_cast<int64_t>(m.uordblks + m.hblkhd);
}

}  // namespace

TEST_CASE("relu_dropout equals dropout(relu(h)): outputs, draws and gradients", "[demos][relu_dropout]") {
  torch::manual_seed(3);
  for (auto dtype : {torch::kFloat, torch::kDouble, torch::kBFloat16}) {
    // A third of the entries negative or zero, so that relu's mask and dropout's overlap every way.
    auto h0 = torch::randn({6, 7, 33}).to(dtype);
    h0.view(-1).narrow(0, 0, 40).zero_();
    for (double p : {0.2, 0.1, 0.5, 0.7}) {  // 1 / (1 - p) exact in bf16 for 0.2 and 0.5, not for 0.1 and 0.7
      INFO("dtype " << dtype << ", p " << p);
      check_equal(h0, p, true);
      check_equal(h0, p, false);
      check_equal(h0, p, true, /*create_graph=*/true);
    }
    INFO("dtype " << dtype << ", p 0 and 1");
    check_equal(h0, 0.0, true);
    check_equal(h0, 1.0, true);
  }
  // Random draws: the same as the composition's, so a seeded run does not change.
  torch::manual_seed(5);
  relu_dropout(torch::randn({100}), 0.3, true);
  const auto after_fused = torch::rand({4});
  torch::manual_seed(5);
  composed(torch::randn({100}), 0.3, true);
  CHECK(torch::equal(after_fused, torch::rand({4})));
  // Without a gradient anywhere it is a plain function.
  const auto plain = relu_dropout(torch::randn({3, 4}), 0.5, true);
  CHECK_FALSE(plain.requires_grad());
  CHECK(relu_dropout(torch::empty({0, 4}).requires_grad_(true), 0.5, true).numel() == 0);
}

TEST_CASE("relu_dropout: twice differentiable, as the composition", "[demos][relu_dropout]") {
  torch::manual_seed(4);
  const auto h0 = torch::randn({5, 9}, torch::kDouble), w = torch::randn({5, 9}, torch::kDouble);
  const auto u = torch::randn({5, 9}, torch::kDouble);
  auto second = [&](auto&& f) {
    const auto h = h0.clone().requires_grad_(true), v = w.clone().requires_grad_(true);
    torch::manual_seed(8);
    const auto y = f(h);
    const auto dh = torch::autograd::grad({(y * v).sum()}, {h}, {}, true, true)[0];
    return torch::autograd::grad({(dh * u).sum()}, {v})[0];  // d/dv of <dh, u>: u where kept, scaled
  };
  const auto got = second([](const torch::Tensor& h) { return relu_dropout(h, 0.25, true); });
  const auto want = second([](const torch::Tensor& h) { return composed(h, 0.25, true); });
  CHECK(same(got, want));
  CHECK(got.abs().sum().item<double>() > 0);
}

TEST_CASE("relu_dropout keeps its output only: a third of the composition's memory", "[demos][relu_dropout]") {
  // 1 M float32 elements (4 MB): the composition keeps relu's output, dropout's mask (float32 on the
  // CPU) and dropout's output; relu_dropout only the output.
  const auto h = torch::randn({1024, 1024}).requires_grad_(true);
  const int64_t mb = 1 << 20;
  const int64_t fused = held_after_forward(
      h, [](const torch::Tensor& x) { return relu_dropout(x, 0.2, true); }, malloc_in_use);
  const int64_t eager = held_after_forward(
      h, [](const torch::Tensor& x) { return composed(x, 0.2, true); }, malloc_in_use);
  INFO("held after forward: relu_dropout " << fused << " bytes, composition " << eager << " bytes");
  CHECK(eager >= 11 * mb);  // the measurement sees the three tensors
  CHECK(fused >= 4 * mb);
  CHECK(fused < 5 * mb);
}

TEST_CASE("relu_dropout refuses a probability outside [0, 1]", "[demos][relu_dropout]") {
  const auto h = torch::randn({2, 2});
  CHECK_THROWS_AS(relu_dropout(h, -0.1, true), volt::ConfigError);
  CHECK_THROWS_WITH(relu_dropout(h, 1.5, true), Catch::Contains("must be in [0, 1], got 1.5"));
}

TEST_CASE("relu_dropout on the GPU: bf16, fp16 and float32 equal the composition, with two fifths of its memory",
          "[cuda][demos][relu_dropout]") {
  if (volt::testing::no_cuda()) return;
  torch::manual_seed(6);
  for (auto dtype : {torch::kBFloat16, torch::kHalf, torch::kFloat}) {
    auto h0 = torch::randn({8, 256, 512}).to(dtype).cuda();
    for (double p : {0.2, 0.1}) {
      INFO("dtype " << dtype << ", p " << p);
      check_equal(h0, p, true);
      check_equal(h0, p, false);
      check_equal(h0, p, true, /*create_graph=*/true);
    }
  }
  // Memory kept by forward, bf16: the composition keeps relu's output (2 bytes an element), the
  // mask (1) and the output (2); relu_dropout the output alone.
  const auto h = torch::randn({4096, 4096}, torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA))
                     .requires_grad_(true);
  auto allocated = [] { return volt::compat::cuda_memory_stats().allocated; };
  const int64_t n = h.numel();
  CHECK(held_after_forward(
            h, [](const torch::Tensor& x) { return relu_dropout(x, 0.2, true); }, allocated) == 2 * n);
  CHECK(held_after_forward(
            h, [](const torch::Tensor& x) { return composed(x, 0.2, true); }, allocated) == 5 * n);
}
