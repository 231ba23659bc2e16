#pragma once
/// BackwardStepper: FSDP's optimizer_in_backward (PyTorch's name; ZeRO-Offload's overlapped
/// optimizer). Each unit's shard is stepped as soon as its reduced gradient is final, while
/// backward goes on with the other units, instead of all of them after backward.
///
/// [Note: why it is exact] Adam, AdamW, SGD and the other per-element optimizers update each
/// element from its own value, gradient and state only, so stepping the shard unit by unit gives
/// the same floats as one step of all of them, provided that each unit's gradient is the one the
/// whole step would see, and the same kernel runs (step_parameters in optim/fused_adam.h picks the
/// path per unit as fused_adam_step picks it for the whole optimizer; FSDP's units share one dtype
/// and device). What needs every gradient first cannot be exact and is refused before training
/// (trainer/optimization.cpp): clipping by norm, 16-mixed's skipped steps, manual optimization,
/// several optimizers. Clipping by value is per element: applied to each unit before its step.
///
/// Two ways to run the steps:
///   - in place (default): on the thread that runs the unit's gradient hook (autograd's), right
///     after the unit's reduction; on a GPU the kernels are queued behind the unit's backward.
///   - on a host thread (`host_thread`, with cpu_offload): the thread waits for the gradient's copy
///     to the host (a compat::DeviceMark) and steps the host shard while the GPU goes on with
///     backward: the host optimizer overlaps backward instead of following it.
/// finish() waits for every queued step; backward returns only after it. Each unit's gradient is
/// freed as soon as it has stepped, so hooks after backward (on_before_optimizer_step) see none.
///
/// Ownership: shares the optimizer; borrows the FlatParams (they outlive the steps: finish() runs
/// before backward returns and in the destructor). Thread-safety: step() and finish() from one
/// thread (the training or autograd thread); the host thread touches only the unit it steps and the
/// optimizer, which nothing else uses during backward.
#include <torch/optim/optimizer.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "volt/core/compat.h"
#include "volt/strategies/fsdp/flat_param.h"

namespace volt::detail {

struct BackwardStepperOptions {
  bool host_thread = false;          // step on a host thread of its own (cpu_offload)
  std::optional<double> clip_value;  // clamp each unit's gradient to [-v, v] before its step
};

class BackwardStepper {
 public:
  BackwardStepper(std::shared_ptr<torch::optim::Optimizer> optimizer, BackwardStepperOptions options);
  ~BackwardStepper();
  BackwardStepper(const BackwardStepper&) = delete;
  BackwardStepper& operator=(const BackwardStepper&) = delete;

  /// Steps this rank's slices of `unit` that have a gradient (expose_slice_grads done), now or, with
  /// host_thread, once `ready` has passed (the gradient's copy to the host).
  void step(FlatParam& unit, const compat::DeviceMark& ready);
  /// Waits until every step queued has run; rethrows the first error of the host thread.
  void finish();
  const torch::optim::Optimizer& optimizer() const { return *optimizer_; }
  void set_clip_value(std::optional<double> value) { options_.clip_value = value; }

 private:
  void run(FlatParam& unit);
  void loop();

  std::shared_ptr<torch::optim::Optimizer> optimizer_;
  BackwardStepperOptions options_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  struct Job {
    FlatParam* unit;
    compat::DeviceMark ready;
  };
  std::deque<Job> queue_;
  bool busy_ = false, stop_ = false;
  std::exception_ptr error_;
};

}  // namespace volt::detail
