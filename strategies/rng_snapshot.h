#pragma once
/// The default random generators' states at one point, put back at another: activation
/// checkpointing recomputes a forward in backward with the forward's dropout masks; CUDA graphs
/// capture a forward without spending the random numbers the eager run would draw.
///
/// Thread-safety: each generator is locked while read or written.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <torch/types.h>

#include <mutex>
#include <utility>
#include <vector>

namespace volt::detail {

struct RngSnapshot {
  std::vector<std::pair<at::Generator, torch::Tensor>> states;

  /// The CPU generator's state and that of every CUDA device one of `tensors` lives on.
  static RngSnapshot capture(const std::vector<torch::Tensor>& tensors) {
    std::vector<at::Generator> gens{at::detail::getDefaultCPUGenerator()};
    for (const auto& t : tensors) {
      if (!t.defined() || !t.is_cuda()) continue;
      at::Generator g = at::globalContext().defaultGenerator(t.device());
      bool seen = false;
      for (const auto& h : gens) seen = seen || h == g;
      if (!seen) gens.push_back(g);
    }
    RngSnapshot s;
    for (auto& g : gens) {
      std::lock_guard<std::mutex> lock(g.mutex());
      s.states.emplace_back(g, g.get_state());
    }
    return s;
  }
  /// The current states of the same generators.
  RngSnapshot now() const {
    RngSnapshot s;
    for (const auto& [g, st] : states) {
      at::Generator gen = g;
      std::lock_guard<std::mutex> lock(gen.mutex());
      s.states.emplace_back(gen, gen.get_state());
    }
    return s;
  }
  void restore() const {
    for (const auto& [g, st] : states) {
      at::Generator gen = g;
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(st);
    }
  }
};

}  // namespace volt::detail
