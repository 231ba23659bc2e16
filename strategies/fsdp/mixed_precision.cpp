#include "volt/strategies/fsdp/mixed_precision.h"

#include "volt/core/compat.h"
#include "volt/core/errors.h"

namespace volt::detail {

FSDPDtypes resolve_dtypes(const FSDPOptions& options, const Precision& precision, const std::string& accelerator) {
  FSDPDtypes d;
  const bool bf16 = precision.compute_dtype() == at::kBFloat16 || precision.compute_dtype() == at::kHalf;
  d.param = options.param_dtype ? Precision::dtype_from_name(*options.param_dtype, "trainer.strategy.param_dtype")
                                : (bf16 ? precision.compute_dtype() : at::kFloat);
  d.reduce = options.reduce_dtype ? Precision::dtype_from_name(*options.reduce_dtype, "trainer.strategy.reduce_dtype")
                                  : d.param;
  if (options.buffer_dtype)
    d.buffer = Precision::dtype_from_name(*options.buffer_dtype, "trainer.strategy.buffer_dtype");
  VOLT_CHECK(accelerator != "cpu" || compat::kCpuHalfMatmul || d.param != at::kHalf, ConfigError,
             "config key 'trainer.strategy.param_dtype': float16 has no CPU matmul kernels in this LibTorch; use "
             "bfloat16 on the CPU (or accelerator: cuda)");
  return d;
}

}  // namespace volt::detail
