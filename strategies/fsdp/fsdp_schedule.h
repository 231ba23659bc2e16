#pragma once
/// FSDPSchedule: when each FSDP unit gathers, frees and reduces, for one forward and backward.
///
/// Where things happen (a newcomer's map):
///   all-gather before forward ........ UnitInterceptor::around -> pre_forward -> FlatParam::unshard
///   free after forward (FULL_SHARD) .. post_forward -> FlatParam::reshard (not when the unit is
///                                      the next to gather: runs_again_next)
///   gather again before backward ..... the hook on the unit's output (pre-backward; not for a
///                                      unit whose backward reads no parameters: gathers_for_backward)
///   reduce-scatter after backward .... grad-accumulator hooks -> on_grads_ready
///                                      -> FlatParam::reduce_gradients_async (not waited for);
///                                      resolve_reductions at the end of backward
///   prefetch ......................... prefetch_after (forward / backward order), may_prefetch
///                                      (limit_all_gathers)
///   end of backward .................. finish_backward: unused units and the root, in unit order
///   optimizer step in backward ....... (optimizer_in_backward) on_grads_ready -> finish_and_step:
///                                      the previous unit's reduction finished, its slices stepped
///                                      by the BackwardStepper while the next unit's reduction runs;
///                                      finish_backward steps the rest and waits for all
///
/// [Note: collective order] Every collective a rank issues must line up with the other ranks'. The
/// forward order is the module's call order (the same on every rank); gradients become ready in
/// reverse order on every rank; units that got no gradient are reduced at the end of backward in
/// unit index order. Prefetches follow the previous step's order, which is the same everywhere.
///
/// Ownership: owns the units (units()[0] is the root) and the hooks it installs; borrows the mesh
/// and the modules. The interceptors and hooks it leaves on modules hold only a weak token, so they
/// turn into no-ops once the schedule is gone. Thread-safety: one training thread.
#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "volt/profiler/profiler.h"
#include "volt/strategies/fsdp/fsdp_mesh.h"
#include "volt/strategies/fsdp/fsdp_unit.h"
#include "volt/strategies/fsdp/optimizer_in_backward.h"
#include "volt/strategies/strategy_options.h"

namespace torch::autograd {
struct Node;
}

namespace volt::detail {

struct FSDPScheduleOptions {
  bool free_after_forward = true;  // FULL_SHARD / HYBRID_SHARD
  BackwardPrefetch backward_prefetch = BackwardPrefetch::BackwardPre;
  bool forward_prefetch = false;
  bool limit_all_gathers = true;
  at::ScalarType reduce_dtype = at::kFloat;
  int64_t world_size = 1;
  torch::Device device = torch::kCPU;  // the compute device (waited on for offloaded gradients)
  Profiler* profiler = nullptr;        // times gathers and reductions (borrowed; nullptr: off)
};

class FSDPSchedule {
 public:
  FSDPSchedule(FSDPScheduleOptions options, const FSDPMesh& mesh);
  ~FSDPSchedule();
  FSDPSchedule(const FSDPSchedule&) = delete;
  FSDPSchedule& operator=(const FSDPSchedule&) = delete;

  /// Takes over the units (index 0 is the root, whose module is not intercepted), installs an
  /// interceptor around every other unit's forward and a gradient hook on every trainable parameter.
  void install(std::vector<FSDPUnit> units);
  /// Removes the interceptors and hooks and gives back the units (teardown).
  std::vector<FSDPUnit> uninstall();
  std::vector<FSDPUnit>& units() { return units_; }
  const std::vector<FSDPUnit>& units() const { return units_; }

  /// Before a training step's forward: frees any unit left gathered, gathers the root.
  void begin_training_step();
  /// Frees every non-root unit still gathered (after an optimizer step their values are stale).
  void reshard_units();
  /// Gathers the root (no-op when gathered), frees it, or re-gathers it from its updated shard:
  /// for manual optimization, where forwards follow backward and optimizer steps within one step.
  void unshard_root() { unshard(0); }
  void reshard_root() { reshard(0); }
  void refresh_root() {
    reshard(0);
    unshard(0);
  }
  /// Runs `fn` (an evaluation step) with the root gathered, freeing it afterwards.
  void with_root_gathered(const std::function<void()>& fn);
  /// loss.backward() with the units' gradient hooks; `sync` false on accumulation micro-steps (no
  /// collective: full gradients stay in param.grad). On return every unit is resharded and, on a
  /// sync step, holds its reduced shard gradient in its slices' .grad.
  void backward(const torch::Tensor& loss, bool sync);
  /// Clears the gradients of the slices `optimizer` steps. A unit whose other slices hold no
  /// gradient drops its whole shard gradient (the one-optimizer case); otherwise only this
  /// optimizer's ranges are zeroed, so another optimizer's pending gradients survive (manual
  /// optimization with several optimizers).
  void zero_grad(const torch::optim::Optimizer& optimizer);

  /// optimizer_in_backward: each unit's slices are stepped by `stepper` (borrowed; null turns it
  /// off) as soon as the unit's reduced gradient is final, on sync steps only (an accumulation
  /// micro-step reduces nothing, so nothing steps).
  void set_stepper(BackwardStepper* stepper) { stepper_ = stepper; }
  /// Units stepped in the last sync backward, and how many of them while autograd still ran (the
  /// others at its end: the last unit to get gradients, unused units, the root).
  struct BackwardSteps {
    int64_t units = 0, during_autograd = 0;
  };
  const BackwardSteps& backward_steps() const { return backward_steps_; }

 private:
  friend class UnitInterceptor;
  void pre_forward(size_t unit);
  void post_forward(size_t unit, const torch::Tensor& output);
  /// Whether the unit whose forward just ran is the next one to gather (see the note).
  bool runs_again_next(size_t unit) const;
  /// Whether the unit is gathered again for its backward: not when its module says its backward
  /// reads no parameters (HookedModule::backward_reads_parameters: embeddings) and it is not
  /// activation-checkpointed.
  bool gathers_for_backward(size_t unit) const;
  void on_grads_ready(size_t unit);
  /// optimizer_in_backward: completes the unit's reduction (this rank had its gradients) and steps it.
  void finish_and_step(size_t unit);
  /// Exposes the unit's shard gradient to its slices and hands it to the stepper.
  void step_unit(size_t unit);
  void finish_backward();
  /// Waits for the reductions in flight, agrees on which units any rank had gradients for, and
  /// adds the means to the shard gradients.
  void resolve_reductions();
  void prefetch_after(size_t unit, bool backward);
  void prefetch_backward(size_t unit);
  bool may_prefetch() const;
  void unshard(size_t unit);
  void reshard(size_t unit) { units_[unit].flat->reshard(); }

  FSDPScheduleOptions options_;
  const FSDPMesh& mesh_;
  std::vector<FSDPUnit> units_;
  std::vector<size_t> forward_order_;  // the previous step's forward order (for prefetching)
  std::vector<size_t> current_order_;  // this step's so far
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // keep the grad hooks alive
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  std::optional<size_t> in_flight_;  // the unit whose reduce-scatter may still be running
  bool sync_ = true;
  bool in_backward_ = false;
  BackwardStepper* stepper_ = nullptr;
  std::vector<char> stepped_;  // per unit, this backward (optimizer_in_backward)
  BackwardSteps backward_steps_;
};

}  // namespace volt::detail
