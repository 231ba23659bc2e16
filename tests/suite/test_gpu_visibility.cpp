// The suite's own rule for the GPU (tests/gpu_visibility.h): a run of volt_tests that selects no
// [cuda] case hides every GPU from itself and from the processes it starts; one that selects [cuda]
// cases keeps them. Checked through the environment a real run of volt_tests sees, on any machine.
#include <torch/torch.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "boring_model.h"
#include "gpu_visibility.h"

using namespace volt::testing;

namespace {
/// Prints what this process and a child of it see in CUDA_VISIBLE_DEVICES, when run_self asks
/// (a run of every [cuda] case selects the probe too, and then it does nothing).
void print_visibility(const char* who) {
  if (std::getenv("VOLT_GPU_VISIBILITY_PROBE") == nullptr) return;
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  // The device count too: on a GPU machine it shows that CUDA had not started before main hid it.
  std::printf("%s: self=[%s] gpus=%d\n", who, v ? v : "unset", static_cast<int>(torch::cuda::device_count()));
  std::fflush(stdout);
  const std::string child = std::string("printf '%s: child=[%s]\\n' ") + who + " \"${CUDA_VISIBLE_DEVICES-unset}\"";
  REQUIRE(std::system(child.c_str()) == 0);
}

/// Runs this test program with `args` (shell words) and CUDA_VISIBLE_DEVICES=5; its stdout and
/// stderr.
std::string run_self(const std::string& args) {
  const std::string dir = temp_dir("gpu-visibility");
  const std::string cmd = "VOLT_GPU_VISIBILITY_PROBE=1 CUDA_VISIBLE_DEVICES=5 /proc/" + std::to_string(::getpid()) +
                          "/exe " + args + " > " + dir + "/log 2>&1";
  const int rc = std::system(cmd.c_str());
  INFO(read_text(dir + "/log"));
  CHECK(rc == 0);
  return read_text(dir + "/log");
}
}  // namespace

TEST_CASE("gpu visibility probe (cpu)", "[.][gpu_visibility_probe]") { print_visibility("cpu"); }
TEST_CASE("gpu visibility probe (cuda)", "[.][cuda][gpu_visibility_probe]") { print_visibility("cuda"); }

TEST_CASE("gpu_visibility: hidden unless the run selects [cuda] cases", "[suite]") {
  CHECK(gpu_visibility({}) == GpuVisibility::Hide);
  CHECK(gpu_visibility({{"options"}, {"core", "host_buffers"}}) == GpuVisibility::Hide);
  CHECK(gpu_visibility({{"cuda", "llm"}, {"cuda"}}) == GpuVisibility::Keep);
  CHECK(gpu_visibility({{"cuda", "llm"}, {"llm"}}) == GpuVisibility::KeepMixed);
  CHECK(gpu_visibility({{"cuda_graph"}}) == GpuVisibility::Hide);  // the tag itself, not a prefix
  CHECK(apply_gpu_visibility(GpuVisibility::KeepMixed, /*gpu_visible_if_kept=*/false).empty());
  CHECK_THAT(apply_gpu_visibility(GpuVisibility::KeepMixed, true), Catch::Contains("'~[cuda]' and '[cuda]' apart"));
}

TEST_CASE("volt_tests hides the GPU from runs of CPU cases and their children, not from [cuda] runs", "[suite]") {
  const std::string cpu = run_self("'gpu visibility probe (cpu)'");
  CHECK_THAT(cpu, Catch::Contains("cpu: self=[] gpus=0") && Catch::Contains("cpu: child=[]"));
  const std::string cuda = run_self("'gpu visibility probe (cuda)'");
  CHECK_THAT(cuda, Catch::Contains("cuda: self=[5]") && Catch::Contains("cuda: child=[5]"));
  // Both selected: the GPU stays (a warning says so where one is visible; none is here or the
  // probe's CUDA_VISIBLE_DEVICES=5 names no device).
  const std::string both = run_self("'[gpu_visibility_probe]'");
  CHECK_THAT(both, Catch::Contains("cpu: self=[5]") && Catch::Contains("cuda: self=[5]"));
  // -# (file names as tags): the selection is known only once the run starts, so the GPU stays.
  CHECK_THAT(run_self("-# '[#test_gpu_visibility][gpu_visibility_probe]'"), Catch::Contains("cpu: self=[5]"));
}

TEST_CASE("no_cuda fails a [cuda] case that finds no GPU when VOLT_TEST_REQUIRE_GPU is set", "[suite]") {
  if (torch::cuda::is_available()) return;  // the rule is for machines without one
  const std::string dir = temp_dir("require-gpu");
  const std::string cmd = "VOLT_TEST_REQUIRE_GPU=1 /proc/" + std::to_string(::getpid()) +
                          "/exe 'accelerator and devices *' > " + dir + "/log 2>&1";
  CHECK(std::system(cmd.c_str()) != 0);
  CHECK_THAT(read_text(dir + "/log"), Catch::Contains("VOLT_TEST_REQUIRE_GPU is set"));
}
