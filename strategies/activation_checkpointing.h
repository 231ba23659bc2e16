#pragma once
/// Activation checkpointing: the activations inside chosen submodules are not kept after forward;
/// backward runs the submodule's forward again (with the forward's RNG and autocast state, so
/// dropout draws the same mask) and backpropagates through the recomputed graph.
///
/// Mechanism: an interceptor (priority 10, inside an FSDP unit's gather at priority 0) runs the
/// body without a graph and gives the output a custom autograd node that recomputes it. Under FSDP
/// FULL_SHARD the unit's pre-backward hook gathers its parameters before that node runs, so a
/// recomputation gathers nothing extra. Unlike PyTorch's reentrant checkpoint, parameters inside get
/// their gradients even when no input requires grad (the node is attached to the output directly),
/// and the node hands their gradients to the outer backward instead of accumulating them itself:
/// each parameter's gradient arrives once a backward, however many checkpointed calls (and uses
/// outside them) it has, as without checkpointing (what FSDP's and DDP's reductions count on).
/// Tensors the forward reads from elsewhere (not an input, not the module's parameter) get their
/// gradients accumulated inside the node, as before. On LibTorch 2.x a hook registered on a
/// parameter with register_hook also sees each checkpointed call's part of its gradient. A double
/// backward (create_graph) through a checkpointed module is a ConfigError.
///
/// Ownership: the modules hold the interceptors; the autograd graph holds what backward needs.
/// Thread-safety: one training thread.
#include <torch/nn/module.h>

#include <string>

#include "volt/core/hooked_module.h"
#include "volt/strategies/strategy_options.h"

namespace volt {

class ActivationCheckpointing : public ForwardInterceptor {
 public:
  static constexpr int kPriority = 10;
  static constexpr const char* kName = "activation_checkpoint";
  torch::Tensor around(torch::nn::Module& module, const TensorVec& inputs, const ForwardFn& next) override;
  const char* name() const override { return kName; }
};

/// Installs activation checkpointing on the submodules of `root` that `policy` picks (see
/// select_modules: a non-empty policy that picks nothing is a ConfigError naming `config_key`),
/// or on every `policy.every_n_modules`-th of them in the model's order (a ConfigError when that is
/// more than the picks). Returns how many modules it was installed on (0 for an empty policy).
size_t apply_activation_checkpointing(torch::nn::Module& root, const ModulePolicy& policy,
                                      const std::string& config_key);
/// Removes it from every submodule of `root`; returns how many had it.
size_t remove_activation_checkpointing(torch::nn::Module& root);

}  // namespace volt
