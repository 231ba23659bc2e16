// Torch first: its glog CHECK macro must not replace Catch's (see libtorch-facts.md).
#include <torch/torch.h>
#define CATCH_CONFIG_RUNNER
#include <spdlog/spdlog.h>

#include <catch2/catch.hpp>

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);
  torch::set_num_threads(1);
  return Catch::Session().run(argc, argv);
}
