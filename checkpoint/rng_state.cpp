#include "volt/checkpoint/rng_state.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>

#include <mutex>

namespace volt {

namespace {
at::Generator generator(const std::string& kind, const torch::Device& device) {
  if (kind == "cpu") return at::detail::getDefaultCPUGenerator();
  return at::globalContext().defaultGenerator(device);
}
}  // namespace

std::map<std::string, torch::Tensor> capture_rng_states(const torch::Device& device) {
  std::map<std::string, torch::Tensor> out;
  for (const std::string kind : {"cpu", "cuda"}) {
    if (kind == "cuda" && !device.is_cuda()) continue;
    at::Generator g = generator(kind, device);
    std::lock_guard<std::mutex> lock(g.mutex());
    out[kind] = g.get_state();
  }
  return out;
}

void restore_rng_states(const std::map<std::string, torch::Tensor>& states, const torch::Device& device) {
  for (const auto& [kind, state] : states) {
    if (kind == "cuda" && !device.is_cuda()) continue;
    if (kind != "cpu" && kind != "cuda") continue;
    at::Generator g = generator(kind, device);
    std::lock_guard<std::mutex> lock(g.mutex());
    g.set_state(state);
  }
}

}  // namespace volt
