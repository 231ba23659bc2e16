#include "volt/demos/relu_dropout.h"

#include <torch/autograd.h>
#include <torch/torch.h>

#include "volt/core/errors.h"

namespace volt::demos {

namespace {

/// Whether torch::dropout takes the fused native_dropout kernel (a byte mask, scale applied in the
/// kernel's float arithmetic) or the composite one (a mask of h's dtype holding 0 or 1 / (1 - p)).
/// Mirrors ATen's is_fused_kernel_acceptable for CPU and CUDA tensors, so that the backward runs
/// the kernels eager's would (ATen also fuses on XPU and other backends, where the composite
/// backward below rounds the scale to h's dtype and so may differ from eager's in the last bit).
bool fused_dropout(const torch::Tensor& t, double p) { return t.is_cuda() && p > 0.0 && p < 1.0 && t.numel() > 0; }

struct ReluDropoutFunction : public torch::autograd::Function<ReluDropoutFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& h, double p, bool train) {
    auto y = torch::dropout(torch::relu(h), p, train);
    ctx->save_for_backward({y});
    ctx->saved_data["p"] = p;
    ctx->saved_data["active"] = train && p > 0.0 && h.numel() > 0;  // torch::dropout returned relu(h) otherwise
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto y = ctx->get_saved_variables()[0];
    const double p = ctx->saved_data["p"].toDouble();
    const auto& g = grads[0];
    torch::Tensor dh;
    if (!ctx->saved_data["active"].toBool()) {
      dh = at::threshold_backward(g, y, 0);  // relu's backward alone
    } else if (p >= 1.0) {
      dh = torch::zeros_like(g);  // every element dropped
    } else if (fused_dropout(y, p)) {
      // Eager's formulas: the kernel's float scale, or its differentiable form (the scale rounded to
      // g's dtype) when backward records a graph, as native_dropout's derivative does.
      const auto kept = y > 0;
      dh = torch::GradMode::is_enabled() ? g * (kept.type_as(g) * (1.0 / (1.0 - p)))
                                         : at::native_dropout_backward(g, kept, 1.0 / (1.0 - p));
    } else {
      // The composite dropout multiplies by a mask of y's dtype holding 1 / (1 - p) rounded to it.
      const auto scale = torch::ones({}, y.options()).div_(1.0 - p);
      dh = at::threshold_backward(g * scale, y, 0);
    }
    return {dh, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor relu_dropout(const torch::Tensor& h, double p, bool train) {
  VOLT_CHECK(p >= 0.0 && p <= 1.0, ConfigError, "relu_dropout: the dropout probability must be in [0, 1], got ", p);
  return ReluDropoutFunction::apply(h, p, train);
}

}  // namespace volt::demos
