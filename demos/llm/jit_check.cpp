#include "volt/demos/llm/jit_check.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

namespace volt::demos::detail {

bool jit_kernels_run(const std::string& what, const std::string& fallback, const std::function<void()>& run) {
  auto refuse = [&](const std::string& why) {
    const size_t keep = 600;  // its last lines say what failed
    spdlog::warn("{}: the runtime-compiled CUDA kernels do not run here ({}); using {} instead", what,
                 why.size() > keep ? "..." + why.substr(why.size() - keep) : why, fallback);
    return false;
  };
  torch::NoGradGuard no_grad;
  try {
    run();
    return true;
  } catch (const c10::Error& e) {
    return refuse(e.what_without_backtrace());
  } catch (const std::exception& e) {  // NVRTC's compile errors are std::runtime_error
    return refuse(e.what());
  }
}

}  // namespace volt::demos::detail
