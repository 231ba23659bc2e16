// Strategy::gradient_norm and clip_gradients by norm: the row-wise norms ([Note: gradient norms
// without fp64 copies], strategies/strategy.cpp) give the fp64 value of the total norm, for
// gradients of any size and shape, fp32 and fp64 together.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "volt/strategies/strategy.h"

using namespace volt;

namespace {
/// The total norm in fp64, element by element: the value clipping by norm means.
double fp64_norm(const std::vector<torch::Tensor>& params) {
  double sq = 0;
  for (const auto& p : params) {
    const torch::Tensor g = p.grad().is_sparse() ? p.grad().coalesce().values() : p.grad();
    sq += g.to(torch::kDouble).square().sum().item<double>();
  }
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
  CHECK(std::abs(strategy.gradient_norm(opt) - want) / want < 1e-8);

  // Clipping to half the norm scales every gradient by the same factor, the fp64 one.
  const auto before = params[0].grad().clone();
  const double total = strategy.clip_gradients(opt, want / 2, GradientClipAlgorithm::Norm);
  CHECK(std::abs(total - want) / want < 1e-8);
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

TEST_CASE("gradient_norm: transposed, bf16, empty and sparse gradients, then overflow and inf", "[strategy][clip]") {
  torch::manual_seed(3);
  SingleDeviceStrategy strategy(Precision("32-true", "cpu"), "cpu");
  auto make = [](torch::Tensor p, torch::Tensor grad) {
    p.requires_grad_(true);
    p.mutable_grad() = std::move(grad);
    return p;
  };
  std::vector<torch::Tensor> params = {
      make(torch::zeros({1500, 700}), torch::randn({700, 1500}).t()),  // not contiguous
      make(torch::zeros({3000}, torch::kBFloat16), torch::randn({3000}).to(torch::kBFloat16)),
      make(torch::zeros({0, 5}), torch::zeros({0, 5})),
      make(torch::zeros({50, 8}), torch::sparse_coo_tensor(torch::tensor({{3, 7, 3}}), torch::randn({3, 8}), {50, 8}))};
  torch::optim::SGD opt(params, torch::optim::SGDOptions(0.1));
  const double want = fp64_norm(params);
  CHECK(std::abs(strategy.gradient_norm(opt) - want) / want < 1e-6);  // bf16 values, fp32 rows

  // Squares beyond fp32's range in a row: the total is taken again in fp64.
  auto big = make(torch::zeros({2048}), torch::full({2048}, 1e20f));
  torch::optim::SGD opt_big({big}, torch::optim::SGDOptions(0.1));
  CHECK(strategy.gradient_norm(opt_big) == Approx(1e20 * std::sqrt(2048.0)).epsilon(1e-6));
  // An inf in a gradient stays inf (16-mixed's scaler then skips the step).
  big.mutable_grad()[5] = std::numeric_limits<float>::infinity();
  CHECK(std::isinf(strategy.gradient_norm(opt_big)));
}
