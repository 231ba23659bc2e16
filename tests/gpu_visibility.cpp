#include "gpu_visibility.h"

#include <torch/torch.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>

namespace volt::testing {

GpuVisibility gpu_visibility(const std::vector<std::vector<std::string>>& selected_tags) {
  size_t cuda = 0;
  for (const auto& tags : selected_tags)
    if (std::find(tags.begin(), tags.end(), "cuda") != tags.end()) ++cuda;
  if (cuda == 0) return GpuVisibility::Hide;
  return cuda == selected_tags.size() ? GpuVisibility::Keep : GpuVisibility::KeepMixed;
}

std::string apply_gpu_visibility(GpuVisibility v, bool gpu_visible_if_kept) {
  if (v == GpuVisibility::Hide) {
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    return "";
  }
  if (v == GpuVisibility::Keep || !gpu_visible_if_kept) return "";
  return "volt_tests: this run selects [cuda] and CPU test cases together, so the GPU stays visible and "
         "CPU cases that name no accelerator may train on it; run '~[cuda]' and '[cuda]' apart (ctest "
         "runs each case apart)";
}

bool no_cuda() {
  if (torch::cuda::is_available()) return false;
  if (std::getenv("VOLT_TEST_REQUIRE_GPU") != nullptr)
    FAIL("no CUDA device visible, and VOLT_TEST_REQUIRE_GPU is set (scripts/gpu.sh): a [cuda] case must run");
  WARN("no CUDA device: CUDA cases not run here");
  return true;
}

}  // namespace volt::testing
