#pragma once
/// FSDPUnit: one FSDP unit (PyTorch FSDP2's FSDPParamGroup): the module it wraps, its flat
/// parameter (flat_param.h: the shard, the gather and the reduce-scatter), how many gradients it
/// waits for in a backward pass, and one explicit training state.
///
/// [Note: a unit's training state]
///   Idle ........ between steps; parameters sharded (or, for SHARD_GRAD_OP after forward, kept)
///   Forward ..... its forward ran in this step (parameters gathered for it)
///   PreBackward . its output's gradient arrived: gathered again, waiting for its parameters'
///                 gradients (counted down by grad-accumulator hooks)
///   PostBackward  its gradients are handled this backward: reduce-scattered on a sync step, kept
///                 whole in param.grad on an accumulation micro-step
/// The schedule (fsdp_schedule.h) moves units through these states; a unit that never ran forward
/// (unused this step) goes from Forward/Idle to PostBackward at the end of backward.
///
/// Ownership: owns its FlatParam; borrows the module. Thread-safety: none (autograd's hooks on the
/// CPU run on the thread that called backward).
#include <memory>
#include <string>

#include "volt/strategies/fsdp/flat_param.h"

namespace torch::nn {
class Module;
}

namespace volt::detail {

enum class TrainingState { Idle, Forward, PreBackward, PostBackward };

struct FSDPUnit {
  FSDPUnit(std::string name, torch::nn::Module* module, std::unique_ptr<FlatParam> flat);

  std::string name;  // module path; "" for the root
  torch::nn::Module* module = nullptr;
  std::unique_ptr<FlatParam> flat;
  TrainingState state = TrainingState::Idle;
  /// Trainable parameters whose gradient this backward still waits for.
  int64_t grads_pending = 0;
  /// Trainable parameters (each reports its gradient once per backward).
  int64_t grads_expected = 0;
  /// Holds a parameter with requires_grad false: later backward nodes may still read it after all
  /// trainable gradients arrived, so it is freed only at the end of backward.
  bool has_frozen = false;

  /// Before a backward pass: waits for every trainable gradient again.
  void begin_backward();
  /// One parameter's gradient arrived; true when it was the last one this backward waited for.
  bool grad_ready();
  bool grads_handled() const { return state == TrainingState::PostBackward; }
};

}  // namespace volt::detail
