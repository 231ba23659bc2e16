// Strategy::gradient_norm and clip_gradients by norm: the row-wise norms ([Note: gradient norms
// without fp64 copies], strategies/strategy.cpp) give the fp64 value of the total norm, for
// gradients of any size and shape, fp32 and fp64 together.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cmath>

#include "volt/strategies/strategy.h"

using namespace volt;

namespace {
/// The total norm in fp64, element by element: the value clipping by norm means.
double fp64_norm(const std::vector<torch::Tensor>& params) {
  double sq = 0;
  for (const auto& p : params) sq += p.grad().to(torch::kDouble).square().sum().item<double>();
  return std::sqrt(sq);
}
}  // namespace

TEST_CASE("gradient_norm equals the fp64 norm for large, odd-sized, fp32 and fp64 gradients", "[strategy][clip]") {
  torch::manual_seed(7);
  // 4.2 M elements in one tensor (where an fp32 reduction in order drifts), a multiple of the row,
  // sizes that leave a short last row or are shorter than one, a scalar, and an fp64 gradient.
  std::vector<torch::Tensor> params = {torch::zeros({2050, 2049}), torch::zeros({4096}),
                                       torch::zeros({1500}),       torch::zeros({7}),
                                       torch::zeros({}),           torch::zeros({33, 65}, torch::kDouble)};
  for (auto& p : params) {
    p.requires_grad_(true);
    p.mutable_grad() = torch::rand_like(p) * 1e-2 + 1e-3;  // all positive: rounding errors add up
  }
  torch::optim::SGD opt(params, torch::optim::SGDOptions(0.1));
  SingleDeviceStrategy strategy(Precision("32-true", "cpu"), "cpu");
  const double want = fp64_norm(params);
  CHECK(std::abs(strategy.gradient_norm(opt) - want) / want < 1e-9);

  // Clipping to half the norm scales every gradient by the same factor, the fp64 one.
  const auto before = params[0].grad().clone();
  const double total = strategy.clip_gradients(opt, want / 2, GradientClipAlgorithm::Norm);
  CHECK(std::abs(total - want) / want < 1e-9);
  const double coef = (want / 2) / (want + 1e-6);
  CHECK(torch::allclose(params[0].grad(), before * coef, 1e-6, 0));
  CHECK(std::abs(fp64_norm(params) - want / 2) / want < 1e-6);
}

TEST_CASE("gradient_norm: parameters without gradients count as zero, none at all give 0", "[strategy][clip]") {
  auto a = torch::ones({3, 4}, torch::requires_grad());
  auto b = torch::ones({5}, torch::requires_grad());
  torch::optim::SGD opt({a, b}, torch::optim::SGDOptions(0.1));
  SingleDeviceStrategy strategy(Precision("32-true", "cpu"), "cpu");
  CHECK(strategy.gradient_norm(opt) == 0.0);
  a.mutable_grad() = torch::full({3, 4}, 2.0);
  // One row: its fp32 norm, rounded once.
  CHECK(strategy.gradient_norm(opt) == Approx(std::sqrt(12 * 4.0)).epsilon(1e-7));
}
