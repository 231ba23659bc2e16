// The fused Adam/AdamW paths (optim/fused_adam.h): which one this LibTorch picks for which tensors
// (compat::kFusedAdamCuda / kFusedAdamCpu), each against torch::optim::AdamW, and stepping a subset
// of the parameters (what FSDP's optimizer_in_backward does per unit) against one whole step.
#include <torch/cuda.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <memory>
#include <vector>

#include "gpu_visibility.h"
#include "volt/core/compat.h"
#include "volt/optim/fused_adam.h"

using namespace volt;

namespace {

/// Parameters of a few sizes (one large enough to be split across threads), the same values in
/// each copy made by clone().
std::vector<torch::Tensor> make_params(uint64_t seed, const torch::TensorOptions& o = {}) {
  torch::manual_seed(seed);
  std::vector<torch::Tensor> ps;
  for (int64_t n : {70001, 13, 256}) ps.push_back(torch::randn({n}).to(o).requires_grad_(true));
  return ps;
}
std::vector<torch::Tensor> clone_params(const std::vector<torch::Tensor>& ps) {
  std::vector<torch::Tensor> out;
  for (const auto& p : ps) out.push_back(p.detach().clone().requires_grad_(true));
  return out;
}
void set_grads(const std::vector<torch::Tensor>& ps, int step) {
  torch::manual_seed(1000 + step);
  for (const auto& p : ps) p.mutable_grad() = torch::randn(p.sizes()).to(p.options()) * (1.0 + step);
}
/// Largest difference relative to the largest magnitude, over all parameters.
double rel_diff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    auto x = a[i].detach().to(torch::kCPU, torch::kDouble), y = b[i].detach().to(torch::kCPU, torch::kDouble);
    d = std::max(d, ((x - y).abs().max() / y.abs().max()).item<double>());
  }
  return d;
}

torch::optim::AdamWOptions adamw_options() {
  return torch::optim::AdamWOptions(1e-2).weight_decay(0.05).betas(std::make_tuple(0.8, 0.95)).eps(1e-6);
}

/// torch::optim::AdamW's step against `path` over `steps` steps on `device`; the relative difference.
double against_torch_optim(AdamStepPath path, const torch::Device& device, int steps) {
  auto ref = make_params(5, torch::TensorOptions().device(device));
  auto mine = clone_params(ref);
  torch::optim::AdamW a(ref, adamw_options()), b(mine, adamw_options());
  for (int k = 0; k < steps; ++k) {
    set_grads(ref, k);
    set_grads(mine, k);
    a.step();
    fused_adam_step(b, path);
  }
  return rel_diff(mine, ref);
}

}  // namespace

TEST_CASE("Fused AdamW: the path this LibTorch picks for CPU and CUDA tensors", "[optim][fused_adamw]") {
  // fp32 on the CPU: volt's host loop, whatever the LibTorch.
  auto cpu = make_params(1);
  set_grads(cpu, 0);
  torch::optim::AdamW host(cpu, adamw_options());
  CHECK(fused_adam_path(host) == AdamStepPath::Host);
  // 16-bit on the CPU: PyTorch's fused kernel from 2.4 on, torch::optim's step before.
  auto bf16 = make_params(1, torch::kBFloat16);
  set_grads(bf16, 0);
  torch::optim::AdamW half(bf16, adamw_options());
  CHECK(fused_adam_path(half) == (compat::kFusedAdamCpu ? AdamStepPath::ATen : AdamStepPath::Step));
  CHECK(compat::fused_adam_available(torch::kCPU) == compat::kFusedAdamCpu);
  // CUDA: PyTorch's fused kernel from 2.1 on.
  CHECK(compat::fused_adam_available(torch::kCUDA) == compat::kFusedAdamCuda);
  CHECK(compat::kFusedAdamCuda == VOLT_TORCH_AT_LEAST(2, 1));
  // Not exactly AdamW or Adam: the optimizer's own step.
  torch::optim::SGD sgd(cpu, torch::optim::SGDOptions(0.1));
  CHECK(fused_adam_path(sgd) == AdamStepPath::Step);
}

TEST_CASE("Fused AdamW: every path this LibTorch has gives torch::optim::AdamW's parameters to 1e-6",
          "[optim][fused_adamw]") {
  CHECK(against_torch_optim(AdamStepPath::Step, torch::kCPU, 10) == 0.0);
  CHECK(against_torch_optim(AdamStepPath::Host, torch::kCPU, 10) < 1e-6);
  if (compat::kFusedAdamCpu) {
    CHECK(against_torch_optim(AdamStepPath::ATen, torch::kCPU, 10) < 1e-6);
  } else {
    // Forced where this LibTorch has no such kernel: refused before anything changes.
    auto ps = make_params(2);
    set_grads(ps, 0);
    const auto before = clone_params(ps);
    torch::optim::AdamW opt(ps, adamw_options());
    CHECK_THROWS_WITH(fused_adam_step(opt, AdamStepPath::ATen), Catch::Contains("not available"));
    CHECK(rel_diff(ps, before) == 0.0);
    CHECK(opt.state().empty());
  }
}

TEST_CASE("Fused AdamW on the GPU: PyTorch's fused kernel where LibTorch has it, torch::optim's values to 1e-6",
          "[cuda][optim][fused_adamw]") {
  if (testing::no_cuda()) return;
  auto gpu = make_params(1, torch::kCUDA);
  set_grads(gpu, 0);
  torch::optim::AdamW dev(gpu, adamw_options());
  CHECK(fused_adam_path(dev) == (compat::kFusedAdamCuda ? AdamStepPath::ATen : AdamStepPath::Step));
  if (compat::kFusedAdamCuda) CHECK(against_torch_optim(AdamStepPath::ATen, torch::kCUDA, 10) < 1e-6);
}

TEST_CASE("step_parameters: two halves stepped apart equal one whole step, bit for bit", "[optim][fused_adamw]") {
  auto run = [](auto make_optimizer, AdamStepPath expected) {
    auto whole = make_params(9);
    auto split = clone_params(whole);
    auto a = make_optimizer(whole);
    auto b = make_optimizer(split);
    for (int k = 0; k < 5; ++k) {
      set_grads(whole, k);
      set_grads(split, k);
      if (!fused_adam_step(*a)) a->step();
      // The halves in the order FSDP's units become ready: the last parameters first.
      CHECK(step_parameters(*b, {split[2]}) == expected);
      CHECK(step_parameters(*b, {split[0], split[1]}) == expected);
      if (k == 2)  // an LR change between steps reaches both
        for (auto* o : {a.get(), b.get()}) o->param_groups()[0].options().set_lr(0.003);
    }
    for (size_t i = 0; i < whole.size(); ++i) CHECK(torch::equal(whole[i], split[i]));
  };
  SECTION("AdamW (host loop)") {
    run([](const std::vector<torch::Tensor>& ps) { return std::make_unique<torch::optim::AdamW>(ps, adamw_options()); },
        AdamStepPath::Host);
  }
  SECTION("SGD with momentum (its own step, each group cut down to the subset)") {
    run(
        [](const std::vector<torch::Tensor>& ps) {
          return std::make_unique<torch::optim::SGD>(ps, torch::optim::SGDOptions(0.1).momentum(0.9));
        },
        AdamStepPath::Step);
  }
}
