#pragma once
/// Param-group hyper-parameters (lr, betas, eps, weight decay, momentum, ...) as YAML, so that a
/// checkpoint restores them with the optimizer state, as PyTorch's Optimizer.load_state_dict
/// restores param_groups: a learning rate a scheduler or the user changed resumes where it was.
/// Doubles are written with 17 significant digits, so they round-trip exactly.
/// Supports LibTorch's Adam, AdamW, SGD, RMSprop and Adagrad (the optimizers volt checkpoints).
/// Thread-safety: none; the optimizer must not be stepped meanwhile.
#include <torch/optim/optimizer.h>
#include <yaml-cpp/yaml.h>

#include <string>

namespace volt {

/// {type: "<Adam|AdamW|SGD|RMSprop|Adagrad>", param_groups: [{lr: ..., ...}, ...]}. Throws
/// CheckpointError for another optimizer type.
YAML::Node optimizer_hparams(const torch::optim::Optimizer& optimizer);
/// Restores optimizer_hparams(); CheckpointError naming `source` when the type or the number of
/// param groups differs (a checkpoint of another optimizer configuration).
void load_optimizer_hparams(torch::optim::Optimizer& optimizer, const YAML::Node& hparams, const std::string& source);
/// The optimizer's type name ("Adam", ...), or "" when volt does not know it.
std::string optimizer_type_name(const torch::optim::Optimizer& optimizer);

}  // namespace volt
