#pragma once
/// Optimizer state as named tensors ("<param name>.<field>", e.g. "layer.weight.exp_avg",
/// "layer.weight.step"), so it can be checkpointed, inspected from Python and resharded. Supports
/// LibTorch's Adam, AdamW, SGD, RMSprop and Adagrad; another optimizer gives a CheckpointError.
#include <torch/optim/optimizer.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace volt {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

/// `params` pairs each tensor the optimizer holds with the name to save it under.
std::map<std::string, torch::Tensor> optimizer_state_to_tensors(torch::optim::Optimizer& optimizer,
                                                                const NamedTensors& params);
/// Restores what optimizer_state_to_tensors saved. Missing entries leave that param without state
/// (as before its first step). Throws CheckpointError on shape mismatch or an unsupported optimizer.
void optimizer_state_from_tensors(torch::optim::Optimizer& optimizer, const NamedTensors& params,
                                  const std::map<std::string, torch::Tensor>& state, const std::string& source);

}  // namespace volt
