#pragma once
/// The element loop of volt's fused host Adam/AdamW step, on plain float arrays. It lives in a
/// translation unit of its own, free of LibTorch headers, so it can be compiled with the flags that
/// let GCC vectorize it (-fno-math-errno for sqrt) and cloned for AVX2 machines.
#include <cstdint>

namespace volt::detail {

/// The step's scalars, already rounded to float as torch::optim's tensor ops round them.
struct AdamScalars {
  float decay = 1.0f;  // AdamW: 1 - lr * weight_decay (1 for Adam)
  float l2 = 0.0f;     // Adam: weight_decay added to the gradient as L2 (0 for AdamW)
  float beta1 = 0.9f, one_minus_beta1 = 0.1f;
  float beta2 = 0.999f, one_minus_beta2 = 0.001f;
  float bias_correction2_sqrt = 1.0f;
  float eps = 1e-8f;
  float neg_step_size = 0.0f;  // -lr / bias_correction1
};

/// One Adam/AdamW update of n elements in a single pass: p, m (exp_avg) and v (exp_avg_sq) are
/// updated in place; `vmax` (max_exp_avg_sq) is null unless amsgrad. Thread-safe for disjoint ranges.
void adam_kernel(float* p, const float* g, float* m, float* v, float* vmax, int64_t n, const AdamScalars& s);

}  // namespace volt::detail
