#pragma once
// Which test cases see the GPU. The CPU test cases name no accelerator, so on a machine with a GPU
// `accelerator: auto` would train them there (and put two ranks of one test on one device): they
// test the CPU paths and must run there whatever the machine has. Test cases tagged [cuda] are the
// GPU's. A run of volt_tests that selects no [cuda] case hides every GPU from itself and the
// processes it starts (CUDA_VISIBLE_DEVICES set to empty, before anything initializes CUDA); a run
// that selects [cuda] cases keeps them. ctest runs each case on its own, so `ctest` on a GPU machine
// runs the CPU cases on the CPU and the [cuda] ones on the GPU.
#include <string>
#include <vector>

namespace volt::testing {

/// What a run does with the GPUs, from the tags of the test cases it selected.
enum class GpuVisibility { Hide, Keep, KeepMixed };

/// Hide when no selected case has the tag "cuda" (compared lower-case, tags without brackets); Keep
/// when every one has; KeepMixed when some have: the others then may see a GPU.
GpuVisibility gpu_visibility(const std::vector<std::vector<std::string>>& selected_tags);

/// Applies `v` to this process's environment (Hide: CUDA_VISIBLE_DEVICES=""). Call before any CUDA
/// use. Returns a warning to print for KeepMixed where a GPU is visible, else "".
std::string apply_gpu_visibility(GpuVisibility v, bool gpu_visible_if_kept);

/// True (after a Catch WARN saying so) where no CUDA device is visible: a [cuda] case then returns
/// without running. With VOLT_TEST_REQUIRE_GPU set (scripts/gpu.sh sets it), the case fails instead.
bool no_cuda();

}  // namespace volt::testing
