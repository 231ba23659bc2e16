#pragma once
/// The check behind swiglu_kernels_work and rotary_kernel_works: whether runtime-compiled CUDA
/// kernels (compat::jit_elementwise) compile and run here.
///
/// Thread-safety: a pure function (it logs).
#include <functional>
#include <string>

namespace volt::demos::detail {

/// Runs `run` outside autograd; false, with a warning naming `what`, the `fallback` taken instead
/// and the end of the error (NVRTC's message holds the whole generated source), when it throws.
bool jit_kernels_run(const std::string& what, const std::string& fallback, const std::function<void()>& run);

}  // namespace volt::demos::detail
