#include "volt/core/compat.h"

#if VOLT_HAVE_JITERATOR
#include <ATen/cuda/jiterator.h>
#endif

namespace volt::compat {

std::vector<at::Tensor> jit_elementwise(const std::string& code, const std::string& name, int num_outputs,
                                        const std::vector<at::Tensor>& inputs) {
#if VOLT_HAVE_JITERATOR
  TORCH_CHECK(num_outputs >= 1 && num_outputs <= 8, "jit_elementwise: 1 to 8 outputs, got ", num_outputs);
  TORCH_CHECK(!inputs.empty() && inputs.size() <= 8, "jit_elementwise: 1 to 8 inputs, got ", inputs.size());
  c10::SmallVector<at::Tensor> in(inputs.begin(), inputs.end());
  auto out = at::cuda::CompileAndLaunchKernel(code, name, num_outputs, in, /*extra_args=*/{},
                                              /*return_by_ref=*/num_outputs > 1);
  return std::vector<at::Tensor>(out.begin(), out.end());
#else
  TORCH_CHECK(false,
              "jit_elementwise: this build has no runtime-compiled CUDA kernels (needs a CUDA LibTorch 2.1+; this is ",
              TORCH_VERSION, ")");
#endif
}

}  // namespace volt::compat
