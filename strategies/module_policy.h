#pragma once
/// Selection of submodules by a ModulePolicy (strategy_options.h): which modules become FSDP units
/// and which get activation checkpointing. One rule for both, so the same YAML means the same
/// modules in either place.
#include <torch/nn/module.h>

#include <string>
#include <utility>
#include <vector>

#include "volt/strategies/strategy_options.h"

namespace volt {

/// A module type name as users write it: "torch::nn::TransformerEncoderLayerImpl" -> "TransformerEncoderLayer".
std::string short_type_name(const std::string& type);

/// True when `policy` picks `module` (named `name` in the model): its type is listed, the predicate
/// says so (a type matches by its full name or its short_type_name), or (size based) it is a HookedModule with at least
/// min_num_params parameters.
bool policy_selects(const ModulePolicy& policy, const torch::nn::Module& module, const std::string& name);

/// The submodules of `root` (root excluded) the policy picks, in named_modules() order. Every pick
/// must be a HookedModule (the only modules a strategy can act around); otherwise ConfigError
/// naming `config_key`. An empty policy picks nothing; a non-empty one that picks nothing is a
/// ConfigError listing the HookedModule types the model has.
std::vector<std::pair<std::string, torch::nn::Module*>> select_modules(torch::nn::Module& root,
                                                                       const ModulePolicy& policy,
                                                                       const std::string& config_key,
                                                                       const std::string& purpose);

}  // namespace volt
