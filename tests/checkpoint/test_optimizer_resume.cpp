// Optimizer state restored under another precision follows the parameters' dtype (as PyTorch's
// load_state_dict), and state saved by another optimizer is refused instead of dropped.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "volt/checkpoint/optimizer_state.h"
#include "volt/core/errors.h"

using namespace volt;
using Catch::Matchers::Contains;

namespace {
/// One Adam step on `p` (so the optimizer has state).
void step_once(torch::optim::Optimizer& opt, torch::Tensor& p) {
  opt.zero_grad();
  p.sum().backward();
  opt.step();
}
}  // namespace

TEST_CASE("Adam state saved in fp32 restores into bf16 parameters as bf16", "[checkpoint][optimizer_state]") {
  torch::Tensor p32 = torch::randn({4, 3}).requires_grad_();
  torch::optim::Adam a32({p32}, torch::optim::AdamOptions(0.01));
  step_once(a32, p32);
  const auto saved = optimizer_state_to_tensors(a32, {{"w", p32}});
  REQUIRE(saved.at("w.exp_avg").scalar_type() == torch::kFloat);

  torch::Tensor p16 = p32.detach().to(torch::kBFloat16).requires_grad_();
  torch::optim::Adam a16({p16}, torch::optim::AdamOptions(0.01));
  optimizer_state_from_tensors(a16, {{"w", p16}}, saved, "test");
  const auto restored = optimizer_state_to_tensors(a16, {{"w", p16}});
  CHECK(restored.at("w.exp_avg").scalar_type() == torch::kBFloat16);
  CHECK(restored.at("w.exp_avg_sq").scalar_type() == torch::kBFloat16);
  CHECK(restored.at("w.step").item<int64_t>() == 1);
  CHECK(torch::allclose(restored.at("w.exp_avg").to(torch::kFloat), saved.at("w.exp_avg"), 1e-2, 1e-3));
  CHECK_NOTHROW(step_once(a16, p16));  // the step runs with matching dtypes
}

TEST_CASE("Optimizer state of another optimizer is refused, naming the field", "[checkpoint][optimizer_state]") {
  torch::Tensor p = torch::randn({5}).requires_grad_();
  torch::optim::Adam adam({p}, torch::optim::AdamOptions(0.01));
  step_once(adam, p);
  const auto saved = optimizer_state_to_tensors(adam, {{"w", p}});
  torch::optim::SGD sgd({p}, torch::optim::SGDOptions(0.1).momentum(0.9));
  try {
    optimizer_state_from_tensors(sgd, {{"w", p}}, saved, "ckpt.ckpt");
    FAIL("restored");
  } catch (const CheckpointError& e) {
    CHECK_THAT(e.what(), Contains("ckpt.ckpt") && Contains("'w'") && Contains("SGD") && Contains("another optimizer"));
  }
  CHECK(sgd.state().empty());
}
