// Torch first: its glog CHECK macro must not replace Catch's (see libtorch-facts.md).
#include <torch/torch.h>
#define CATCH_CONFIG_RUNNER
#include <spdlog/spdlog.h>

#include <catch2/catch.hpp>
#include <iostream>

#include "gpu_visibility.h"

namespace {
/// The tags (lower case) of each test case this run's command line selects.
std::vector<std::vector<std::string>> selected_tags(Catch::Session& session) {
  std::vector<std::vector<std::string>> out;
  const Catch::Config& config = session.config();
  for (const Catch::TestCase& tc : Catch::filterTests(Catch::getAllTestCasesSorted(config), config.testSpec(), config))
    out.push_back(tc.getTestCaseInfo().lcaseTags);
  return out;
}
}  // namespace

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);
  torch::set_num_threads(1);
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  // Before any CUDA use: see gpu_visibility.h. With -# (file names as tags), which Catch adds only
  // once the run starts, the selection is not known here: the GPU stays, as for a mixed run.
  auto visibility = volt::testing::gpu_visibility(selected_tags(session));
  if (session.configData().filenamesAsTags) visibility = volt::testing::GpuVisibility::KeepMixed;
  const bool gpu = visibility == volt::testing::GpuVisibility::KeepMixed && torch::cuda::is_available();
  if (const std::string warning = volt::testing::apply_gpu_visibility(visibility, gpu); !warning.empty())
    std::cerr << warning << "\n";
  return session.run();
}
