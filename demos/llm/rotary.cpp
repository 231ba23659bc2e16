#include "volt/demos/llm/rotary.h"

#include <torch/autograd.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "volt/core/compat.h"
#include "volt/core/errors.h"
#include "volt/demos/llm/jit_check.h"

namespace volt::demos {

namespace {

// The rotation as one runtime-compiled CUDA kernel (compat::jit_elementwise): T is float for bf16,
// fp16 and fp32. One rounding where the mul and addcmul below round twice in bf16.
const char* const kRotateCode = R"(
template <typename T> T volt_rotate(T x1, T x2, T a, T b) {
  return x1 * a + x2 * b;
})";

/// x1 * a + x2 * b over x [B, T, H, hd] seen as [B, T, H, 2, hd/2], a and b [T, 1, 2, hd/2].
torch::Tensor rotate(const torch::Tensor& x, const torch::Tensor& a, const torch::Tensor& b, bool fused) {
  const auto s = x.sizes();
  const auto halves = x.reshape({s[0], s[1], s[2], 2, s[3] / 2});
  const auto x1 = halves.narrow(3, 0, 1), x2 = halves.narrow(3, 1, 1);
  // A double backward differentiates this: out= variants record no graph.
  if (torch::GradMode::is_enabled()) return torch::addcmul(x1 * a, x2, b).reshape(s);
  // The output follows the inputs' layout; reshape is a view for every layout measured.
  if (fused) return compat::jit_elementwise(kRotateCode, "volt_rotate", 1, {x1, x2, a, b})[0].reshape(s);
  // A dense output of its own: TensorIterator would lay out one over broadcast views as it likes.
  auto out = torch::empty(s, x.options().dtype(at::result_type(x, a)));
  auto out_halves = out.view(halves.sizes());
  torch::mul_out(out_halves, x1, a);
  out_halves.addcmul_(x2, b);
  return out;
}

struct RotaryFunction : public torch::autograd::Function<RotaryFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& rope,
                               bool fused) {
    ctx->save_for_backward({rope});
    ctx->saved_data["fused"] = fused;
    return rotate(x, rope.select(3, 0), rope.select(3, 1), fused);  // the columns [c; s] and [-s; c]
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto rope = ctx->get_saved_variables()[0];
    const bool fused = ctx->saved_data["fused"].toBool();
    return {rotate(grads[0], rope.select(2, 0), rope.select(2, 1), fused), torch::Tensor(),  // rows [c; -s], [s; c]
            torch::Tensor()};
  }
};

}  // namespace

torch::Tensor rotary_table(int64_t start, int64_t len, int64_t head_dim, double theta, const torch::Device& device,
                           torch::Dtype dtype) {
  VOLT_CHECK(head_dim > 0 && head_dim % 2 == 0, ConfigError, "rotary_table: head_dim must be even and > 0, got ",
             head_dim);
  VOLT_CHECK(len >= 0 && start >= 0, ConfigError, "rotary_table: positions start at ", start, " for ", len,
             "; both must be >= 0");
  VOLT_CHECK(theta > 1.0 && std::isfinite(theta), ConfigError, "rotary_table: theta must be a finite number > 1, got ",
             theta);
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(device);
  const auto exponent = torch::arange(0, head_dim, 2, f32.dtype(torch::kLong)).to(torch::kFloat) / head_dim;
  const auto inv_freq = 1.0 / torch::pow(theta, exponent);
  const auto pos = torch::arange(start, start + len, f32.dtype(torch::kLong)).to(torch::kFloat);
  const auto freqs = torch::outer(pos, inv_freq);  // [len, hd/2]
  const auto c = freqs.cos().to(dtype), s = freqs.sin().to(dtype);
  // [len, 2 (row), 2 (column), hd/2] = [[c, -s], [s, c]], then a dimension for the heads.
  return torch::stack({torch::stack({c, -s}, 1), torch::stack({s, c}, 1)}, 1).unsqueeze(1);
}

torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& rope, bool fused) {
  VOLT_CHECK(x.dim() == 4 && x.size(3) % 2 == 0 && rope.dim() == 5 && rope.size(0) == x.size(1) && rope.size(1) == 1 &&
                 rope.size(2) == 2 && rope.size(3) == 2 && rope.size(4) * 2 == x.size(3),
             DataError,
             "apply_rotary: x must be [B, T, H, hd] with hd even and the table [T, 1, 2, 2, hd/2] of rotary_table; ",
             "got x ", x.sizes(), ", table ", rope.sizes());
  VOLT_CHECK(rope.device() == x.device(), DataError, "apply_rotary: the rotary table is on ", rope.device(), ", x on ",
             x.device(), "; make the table on x's device");
  VOLT_CHECK(!rope.requires_grad(), DataError, "apply_rotary: the rotary table takes no gradient; pass a table from ",
             "rotary_table (or detach it)");
  return RotaryFunction::apply(x, rope, fused && compat::kJitElementwise && x.is_cuda());
}

bool rotary_kernel_works(const torch::Tensor& x, const torch::Tensor& rope) {
  if (!compat::kJitElementwise || !x.is_cuda()) return false;
  return detail::jit_kernels_run("Rotary embeddings", "ATen's mul and addcmul", [&] {
    // One sequence: the same dtype and strides, so the same kernel variant as the whole batch.
    const auto one = x.detach().narrow(0, 0, std::min<int64_t>(x.size(0), 1));
    rotate(one, rope.select(3, 0), rope.select(3, 1), /*fused=*/true);
  });
}

}  // namespace volt::demos
