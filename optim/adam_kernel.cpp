#include "volt/optim/adam_kernel.h"

#include <cmath>

namespace volt::detail {

// AVX2 + FMA where the CPU has it (x86-64-v3), SSE2 elsewhere; chosen once at load time (ifunc).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define VOLT_CPU_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define VOLT_CPU_CLONES
#endif

namespace {
// The same arithmetic, in the same order, as torch::optim::Adam/AdamW's tensor ops:
//   p *= decay; m = m*b1 + (1-b1)*g; v = v*b2 + (1-b2)*g*g; p += -step * m / (sqrt(v)/sqrt(bc2) + eps)
// read once and written once per element instead of about ten passes and two temporaries.
template <bool kAmsgrad, bool kL2>
inline void adam_loop(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
                      float* __restrict vmax, int64_t n, const AdamScalars& s) {
  const AdamScalars c = s;  // locals, so the compiler knows they do not alias the arrays
  for (int64_t i = 0; i < n; ++i) {
    const float p0 = p[i];
    float gv = g[i];
    if constexpr (kL2) gv = gv + c.l2 * p0;  // only with weight decay: 0 * inf would be NaN
    const float mv = m[i] * c.beta1 + c.one_minus_beta1 * gv;
    const float vv = v[i] * c.beta2 + c.one_minus_beta2 * gv * gv;
    m[i] = mv;
    v[i] = vv;
    float d = vv;
    if constexpr (kAmsgrad) {
      const float old = vmax[i];
      d = (vv > old || vv != vv) ? vv : old;  // torch::max propagates NaN
      vmax[i] = d;
    }
    const float denom = std::sqrt(d) / c.bias_correction2_sqrt + c.eps;
    p[i] = p0 * c.decay + c.neg_step_size * mv / denom;
  }
}
}  // namespace

VOLT_CPU_CLONES
void adam_kernel(float* p, const float* g, float* m, float* v, float* vmax, int64_t n, const AdamScalars& s) {
  const bool l2 = s.l2 != 0.0f;
  if (vmax != nullptr)
    l2 ? adam_loop<true, true>(p, g, m, v, vmax, n, s) : adam_loop<true, false>(p, g, m, v, vmax, n, s);
  else
    l2 ? adam_loop<false, true>(p, g, m, v, nullptr, n, s) : adam_loop<false, false>(p, g, m, v, nullptr, n, s);
}

}  // namespace volt::detail
