// token_cross_entropy (demos/llm/token_cross_entropy.h) against F.cross_entropy(logits.float()):
// the loss and the logits' gradient across chunk boundaries, ignored labels (all of them too), an
// incoming gradient other than 1, bf16 and fp16 logits, logits that are not contiguous or have one
// row, retain_graph, a refused double backward, and the errors a bad batch gets.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cmath>

#include "gpu_visibility.h"
#include "volt/core/errors.h"
#include "volt/demos/llm/token_cross_entropy.h"

using volt::demos::token_cross_entropy;
namespace F = torch::nn::functional;

namespace {
torch::Tensor reference(const torch::Tensor& logits, const torch::Tensor& labels) {
  return F::cross_entropy(logits.to(torch::kFloat).view({-1, logits.size(-1)}), labels.reshape({-1}),
                          F::CrossEntropyFuncOptions().ignore_index(-100));
}

/// Labels [3, 7] over a vocabulary of 11 with some ignored.
torch::Tensor labels_with_ignored() {
  auto labels = torch::randint(0, 11, {3, 7}, torch::kLong);
  labels[0][2] = -100;
  labels[1][0] = -100;
  labels[2][6] = -100;
  return labels;
}
}  // namespace

TEST_CASE("token_cross_entropy equals F.cross_entropy in float32, across chunks", "[llm][cross_entropy]") {
  torch::manual_seed(11);
  const auto logits = torch::randn({3, 7, 11}) * 4;
  const auto labels = labels_with_ignored();
  // chunk_bytes: 1 row, 4 rows (21 = 5 x 4 + 1), and everything in one chunk.
  for (int64_t chunk_bytes : {int64_t{1}, int64_t{4 * 11 * 4}, int64_t{1} << 20}) {
    INFO("chunk_bytes " << chunk_bytes);
    for (double g : {1.0, 0.25}) {
      INFO("incoming gradient " << g);
      const auto la = logits.clone().requires_grad_(true), lr = logits.clone().requires_grad_(true);
      const auto got = token_cross_entropy(la, labels, -100, chunk_bytes), want = reference(lr, labels);
      CHECK(got.scalar_type() == torch::kFloat);
      CHECK(got.dim() == 0);
      CHECK(std::abs(got.item<double>() - want.item<double>()) < 1e-6);
      const auto ga = torch::autograd::grad({got * g}, {la})[0], gr = torch::autograd::grad({want * g}, {lr})[0];
      CHECK(ga.sizes() == logits.sizes());
      CHECK(torch::allclose(ga, gr, 1e-6, 1e-7));
      // Ignored rows get no gradient at all.
      CHECK(ga[0][2].abs().max().item<double>() == 0.0);
      CHECK(ga[1][0].abs().max().item<double>() == 0.0);
    }
  }
  // Without a gradient (validation): the same value.
  torch::NoGradGuard ng;
  CHECK(std::abs(token_cross_entropy(logits, labels, -100, 4 * 11 * 4).item<double>() -
                 reference(logits, labels).item<double>()) < 1e-6);
}

TEST_CASE("token_cross_entropy: bf16 logits give the float32 loss and a bf16 gradient", "[llm][cross_entropy]") {
  torch::manual_seed(12);
  const auto logits = (torch::randn({3, 7, 11}) * 4).to(torch::kBFloat16);
  const auto labels = labels_with_ignored();
  const auto la = logits.clone().requires_grad_(true), lr = logits.clone().requires_grad_(true);
  const auto got = token_cross_entropy(la, labels, -100, 4 * 11 * 4), want = reference(lr, labels);
  CHECK(got.scalar_type() == torch::kFloat);
  CHECK(std::abs(got.item<double>() - want.item<double>()) < 1e-6);  // computed in float32 from the same bf16 values
  const auto ga = torch::autograd::grad({got}, {la}, {}, /*retain_graph=*/true)[0];
  const auto gr = torch::autograd::grad({want}, {lr})[0];
  CHECK(ga.scalar_type() == torch::kBFloat16);
  // Within two bf16 roundings (softmax rounded, then scaled) of the reference's one.
  CHECK(torch::allclose(ga.to(torch::kFloat), gr.to(torch::kFloat), 1.6e-2, 1e-5));
  // retain_graph: a second pass gives the same gradient (the saved buffer is not consumed).
  CHECK(torch::equal(torch::autograd::grad({got}, {la})[0], ga));
}

TEST_CASE("token_cross_entropy: every label ignored gives a nan loss and a zero gradient", "[llm][cross_entropy]") {
  const auto logits = torch::randn({2, 3, 5}).requires_grad_(true);
  const auto labels = torch::full({2, 3}, -100, torch::kLong);
  const auto loss = token_cross_entropy(logits, labels);
  CHECK(std::isnan(loss.item<double>()));
  CHECK(std::isnan(reference(logits, labels).item<double>()));
  // No nan reaches the gradient (a fully padded micro-batch must not poison accumulated gradients).
  const auto g = torch::autograd::grad({loss}, {logits})[0];
  CHECK(torch::equal(g, torch::zeros_like(g)));
}

TEST_CASE("token_cross_entropy: fp16, non-contiguous and one-row logits", "[llm][cross_entropy]") {
  torch::manual_seed(14);
  SECTION("fp16 under a loss scale: small probabilities keep their precision") {
    // Most probabilities here are below fp16's normal range (6.1e-5); 16-mixed's loss scale lifts
    // the gradient into it, which an fp16 buffer of unscaled probabilities would not survive.
    const auto logits = (torch::randn({4, 4000}) * 3).to(torch::kHalf);
    const auto labels = torch::randint(0, 4000, {4}, torch::kLong);
    const auto la = logits.clone().requires_grad_(true), lr = logits.clone().requires_grad_(true);
    const auto got = token_cross_entropy(la, labels), want = reference(lr, labels);
    CHECK(std::abs(got.item<double>() - want.item<double>()) < 1e-5);
    const double scale = 65536.0;
    const auto ga = torch::autograd::grad({got * scale}, {la})[0], gr = torch::autograd::grad({want * scale}, {lr})[0];
    CHECK(ga.scalar_type() == torch::kHalf);
    CHECK(torch::allclose(ga.to(torch::kFloat), gr.to(torch::kFloat), 2e-3, 1e-6));
  }
  SECTION("a transposed view and a single row [V]") {
    const auto base = torch::randn({11, 6});
    const auto logits = base.t();  // [6, 11], not contiguous
    const auto labels = torch::randint(0, 11, {6}, torch::kLong);
    CHECK(std::abs(token_cross_entropy(logits, labels).item<double>() - reference(logits, labels).item<double>()) <
          1e-6);
    const auto row = torch::randn({11}).requires_grad_(true);
    const auto label = torch::tensor(4, torch::kLong);  // 0-dim: one token
    const auto loss = token_cross_entropy(row, label);
    const auto want = F::cross_entropy(row.view({1, 11}), label.view({1}));
    CHECK(std::abs(loss.item<double>() - want.item<double>()) < 1e-6);
    CHECK(torch::autograd::grad({loss}, {row})[0].sizes() == torch::IntArrayRef({11}));
  }
}

TEST_CASE("token_cross_entropy: a double backward is refused, naming the alternative", "[llm][cross_entropy]") {
  const auto logits = torch::randn({2, 3, 5}).requires_grad_(true);
  const auto loss = token_cross_entropy(logits, torch::zeros({2, 3}, torch::kLong));
  CHECK_THROWS_WITH(torch::autograd::grad({loss}, {logits}, {}, true, /*create_graph=*/true),
                    Catch::Contains("double backward") && Catch::Contains("cross_entropy"));
}

TEST_CASE("token_cross_entropy: a bad batch is named", "[llm][cross_entropy]") {
  const auto logits = torch::randn({2, 3, 5});
  auto bad = torch::zeros({2, 3}, torch::kLong);
  bad[1][2] = 5;
  CHECK_THROWS_WITH(token_cross_entropy(logits, bad), Catch::Contains("a label is 5") && Catch::Contains("[0, 5)"));
  bad[1][2] = -3;
  CHECK_THROWS_WITH(token_cross_entropy(logits, bad), Catch::Contains("a label is -3"));
  CHECK_THROWS_AS(token_cross_entropy(logits, torch::zeros({2, 4}, torch::kLong)), volt::DataError);
  CHECK_THROWS_AS(token_cross_entropy(logits, torch::zeros({2, 3}, torch::kInt)), volt::DataError);
  CHECK_THROWS_AS(token_cross_entropy(torch::zeros({2, 3, 5}, torch::kLong), torch::zeros({2, 3}, torch::kLong)),
                  volt::DataError);
  CHECK_THROWS_AS(token_cross_entropy(logits, torch::zeros({2, 3}, torch::kLong), -100, 0), volt::ConfigError);
}

TEST_CASE("token_cross_entropy on the GPU: bf16, fp16 and float32 logits against F.cross_entropy",
          "[cuda][llm][cross_entropy]") {
  if (volt::testing::no_cuda()) return;
  torch::manual_seed(13);
  auto labels = torch::randint(0, 1000, {4, 64}, torch::kLong);
  labels[0][3] = -100;
  labels = labels.cuda();
  for (auto dtype : {torch::kBFloat16, torch::kHalf, torch::kFloat}) {
    INFO("dtype " << dtype);
    const auto logits = (torch::randn({4, 64, 1000}) * 4).to(dtype).cuda();
    const auto la = logits.clone().requires_grad_(true), lr = logits.clone().requires_grad_(true);
    const auto got = token_cross_entropy(la, labels, -100, 64 * 1000 * 4), want = reference(lr, labels);
    CHECK(std::abs(got.item<double>() - want.item<double>()) < 1e-5);
    // 16-mixed's loss scale on fp16: the gradient must not lose its small entries.
    const double scale = dtype == torch::kHalf ? 65536.0 : 0.5;
    const auto ga = torch::autograd::grad({got * scale}, {la})[0], gr = torch::autograd::grad({want * scale}, {lr})[0];
    CHECK(ga.scalar_type() == dtype);
    const double rtol = dtype == torch::kBFloat16 ? 1.6e-2 : dtype == torch::kHalf ? 2e-3 : 1e-5;
    CHECK(torch::allclose(ga.to(torch::kFloat), gr.to(torch::kFloat), rtol, 1e-6));
  }
}
