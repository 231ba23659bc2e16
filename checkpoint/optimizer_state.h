#pragma once
/// Optimizer state as named tensors ("<param name>.<field>", e.g. "layer.weight.exp_avg",
/// "layer.weight.step"), so it can be checkpointed, inspected from Python and resharded. Supports
/// LibTorch's Adam, AdamW, SGD, RMSprop and Adagrad; another optimizer gives a CheckpointError.
#include <torch/optim/optimizer.h>

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace volt {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;
/// Several optimizers seen as one (non-owning): each parameter's state lives in the optimizer
/// that holds it, so the saved names ("<param name>.<field>") need no optimizer index, and a
/// checkpoint reshards the same with one optimizer or several.
using OptimizerList = std::vector<torch::optim::Optimizer*>;

/// Every optimizer state field volt saves, in the order checkpoints list them ("step" is a 0-dim
/// int64 tensor; the others have the parameter's shape).
inline const std::vector<std::string>& optimizer_state_fields() {
  static const std::vector<std::string> fields = {
      "step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer", "square_avg", "grad_avg", "sum"};
  return fields;
}

/// Calls `fn(name, field, tensor)` for each state field of each of `params` that has state ("step" as
/// a 0-dim int64 tensor), without copying: the tensors are the optimizer's own.
void for_each_optimizer_state(
    torch::optim::Optimizer& optimizer, const NamedTensors& params,
    const std::function<void(const std::string& name, const std::string& field, const torch::Tensor& value)>& fn);
/// for_each_optimizer_state over every optimizer of `optimizers` (a parameter is in at most one).
void for_each_optimizer_state(
    const OptimizerList& optimizers, const NamedTensors& params,
    const std::function<void(const std::string& name, const std::string& field, const torch::Tensor& value)>& fn);
/// optimizer_state_from_tensors into whichever optimizer of `optimizers` holds each parameter
/// (parameters no optimizer holds are skipped).
void optimizer_state_from_tensors(const OptimizerList& optimizers, const NamedTensors& params,
                                  const std::map<std::string, torch::Tensor>& state, const std::string& source);
/// `params` pairs each tensor the optimizer holds with the name to save it under (copies).
std::map<std::string, torch::Tensor> optimizer_state_to_tensors(torch::optim::Optimizer& optimizer,
                                                                const NamedTensors& params);
/// Restores what optimizer_state_to_tensors saved. Missing entries leave that param without state
/// (as before its first step). Throws CheckpointError on shape mismatch or an unsupported optimizer.
void optimizer_state_from_tensors(torch::optim::Optimizer& optimizer, const NamedTensors& params,
                                  const std::map<std::string, torch::Tensor>& state, const std::string& source);

}  // namespace volt
