#include "volt/demos/llm/swiglu.h"

#include <torch/autograd.h>
#include <torch/torch.h>

#include <algorithm>

#include "volt/core/compat.h"
#include "volt/demos/llm/jit_check.h"

namespace volt::demos {

namespace {

// T is float for bf16, fp16 and fp32 inputs (jiterator's math type), double for double.
const char* const kForwardCode = R"(
template <typename T> T volt_swiglu_forward(T gate, T up) {
  return gate / (T(1) + std::exp(-gate)) * up;
})";

// d/dg silu(g) = sig(g) * (1 + g * (1 - sig(g))), as ATen's silu_backward.
const char* const kBackwardCode = R"(
template <typename T> void volt_swiglu_backward(T grad, T gate, T up, T& grad_gate, T& grad_up) {
  const T sig = T(1) / (T(1) + std::exp(-gate));
  grad_up = grad * gate * sig;
  grad_gate = grad * up * sig * (T(1) + gate * (T(1) - sig));
})";

torch::Tensor forward_kernel(const torch::Tensor& gate, const torch::Tensor& up) {
  return compat::jit_elementwise(kForwardCode, "volt_swiglu_forward", 1, {gate, up})[0];
}

std::vector<torch::Tensor> backward_kernel(const torch::Tensor& grad, const torch::Tensor& gate,
                                           const torch::Tensor& up) {
  return compat::jit_elementwise(kBackwardCode, "volt_swiglu_backward", 2, {grad, gate, up});
}

struct SwiGLUFunction : public torch::autograd::Function<SwiGLUFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& gate,
                               const torch::Tensor& up, bool fused) {
    ctx->save_for_backward({gate, up});
    ctx->saved_data["fused"] = fused;
    if (fused) return forward_kernel(gate, up);
    auto out = torch::silu(gate);
    return out.mul_(up);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &gate = saved[0], &up = saved[1];
    const auto& grad = grads[0];
    if (torch::GradMode::is_enabled()) {  // create_graph: a differentiable form
      const auto sig = torch::sigmoid(gate);
      return {grad * up * sig * (1 + gate * (1 - sig)), grad * (gate * sig), torch::Tensor()};
    }
    if (ctx->saved_data["fused"].toBool()) {
      auto g = backward_kernel(grad.contiguous(), gate, up);
      return {g[0], g[1], torch::Tensor()};
    }
    // The kernels autograd runs for silu(gate) * up, in its order: the product's two gradients,
    // then silu's.
    const auto grad_silu = grad * up;
    const auto grad_up = grad * torch::silu(gate);
    return {at::silu_backward(grad_silu, gate), grad_up, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up, bool fused) {
  if (!gate.defined() || !up.defined() || gate.sizes() != up.sizes() || gate.scalar_type() != up.scalar_type() ||
      !gate.is_floating_point())
    return torch::silu(gate) * up;
  fused = fused && compat::kJitElementwise && gate.is_cuda() && up.is_cuda();
  return SwiGLUFunction::apply(gate, up, fused);
}

bool swiglu_kernels_work(const torch::Tensor& gate, const torch::Tensor& up) {
  if (!compat::kJitElementwise || !gate.is_cuda() || !up.is_cuda()) return false;
  return detail::jit_kernels_run("SwiGLU", "ATen's silu and product (the same values, more memory traffic)", [&] {
    // A leading slice: the same dtype and alignment, so the same kernel variants as the full
    // tensors (ATen picks them by those), for a few thousand elements.
    const int64_t n = std::min<int64_t>(gate.numel(), 4096);
    const auto g = gate.detach().reshape(-1).narrow(0, 0, n), u = up.detach().reshape(-1).narrow(0, 0, n);
    forward_kernel(g, u);
    backward_kernel(torch::ones_like(g), g, u);
  });
}

}  // namespace volt::demos
