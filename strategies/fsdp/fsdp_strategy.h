#pragma once
/// FSDPStrategy: fully sharded data parallel. The auto_wrap_policy picks units (HookedModules);
/// each unit's parameters are flattened and sharded across the shard group, the optimizer steps
/// only this rank's shard (so its state is sharded too), and an interceptor around each unit's
/// forward gathers its parameters just before they are needed and frees them after.
///
/// The package, one file a concern (as PyTorch's FSDP2 `_fully_shard/`):
///   flat_param.h .......... one unit's flat parameter: the shard, all-gather, reduce-scatter
///   fsdp_unit.h ........... a unit: its module, flat parameter, gradient count, training state
///   fsdp_schedule.h ....... when units gather, free and reduce (forward order, prefetch, gather
///                           limit, backward) -- start here to find where FSDP all-gathers
///   optimizer_in_backward.h the BackwardStepper: a unit's shard stepped inside backward
///   fsdp_mesh.h ........... the (replicate x shard) layout and its process groups
///   mixed_precision.h ..... param / reduce / buffer dtypes from the options and the precision
///   rank_agreement.h ...... the ranks start from the same values (sync_module_states)
///   deferred_wrap.h ....... units wrap() shards while configure_model() builds the model
///   unit_builder.h ........ where FSDP builds its units: which parameters each unit flattens,
///                           tied weights in their common ancestor's unit (ParamOwners)
///   optimizer_shards.h .... the optimizer stepping this rank's slices only
///   fsdp_state_layout.h ... where FSDP describes its state for checkpoints (state_layout) and
///                           gathers it whole (model_state_dict)
///   fsdp_strategy.h ....... this file: the Strategy overrides that call the above in order
///
/// Sharding strategies: FULL_SHARD (free after forward), SHARD_GRAD_OP (keep until after backward),
/// NO_SHARD (shard group of 1, gradients all-reduced), HYBRID_SHARD / _HYBRID_SHARD_ZERO2 (shard
/// within groups of device_mesh[1] ranks, replicate across device_mesh[0] groups).
///
/// Gradient accumulation (micro-steps with sync_gradients false, like PyTorch FSDP's no_sync):
/// no collective runs; each unit's parameters are still freed as soon as its gradients are complete
/// (so the unsharded parameters in flight stay at about two units, as on a sync step), but the
/// *full, unsharded* gradients stay in param.grad and accumulate until the sync step reduce-scatters
/// them. Trade-off: between micro-steps every rank keeps Ψ gradient values (the whole model's
/// gradients in the param dtype, not Ψ/N), in exchange for no communication on micro-steps. Where
/// that memory is too much, reduce-scatter on every micro-step instead (not implemented).
///
/// limit_all_gathers (default true): a prefetch (forward_prefetch, BACKWARD_PRE) starts no new
/// gather while two non-root units are already gathered or gathering; the gather a unit needs
/// itself always happens. buffer_dtype: the module's buffers are cast to it at set-up.
/// Frozen parameters (requires_grad false): a unit holding one is freed only after the whole
/// backward, since later backward nodes may read the frozen weight.
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "volt/strategies/fsdp/deferred_wrap.h"
#include "volt/strategies/fsdp/fsdp_mesh.h"
#include "volt/strategies/fsdp/fsdp_schedule.h"
#include "volt/strategies/fsdp/mixed_precision.h"
#include "volt/strategies/fsdp/rank_agreement.h"
#include "volt/strategies/fsdp/unit_builder.h"
#include "volt/strategies/parallel_strategy.h"

namespace volt {

class FSDPStrategy : public ParallelStrategy {
 public:
  FSDPStrategy(Precision precision, std::string accelerator, int64_t devices, int64_t num_nodes, FSDPOptions options);
  ~FSDPStrategy() override;
  std::string name() const override { return "fsdp"; }
  /// FSDP gathers each unit's parameters into memory it frees after use: a graph cannot follow.
  std::string cuda_graph_unsupported_reason() const override;

  void setup_environment() override;
  /// (replicate, shard): see fsdp_mesh.h.
  MeshLayout mesh_layout() const override;
  void setup_module(LightningModule& module) override;
  /// Deferred initialization: shards `unit` now if auto_wrap_policy selects it (see
  /// LightningModule::wrap); otherwise it is left to set-up like any module. With
  /// sync_module_states its values are rank 0's (one broadcast of this unit); without it the ranks
  /// must agree, which one small all-reduce checks, before each rank keeps only its shard.
  void wrap(torch::nn::Module& unit) override;
  void setup_optimizer(LightningModule& module, OptimizerConfig& config) override;
  /// Leaves the module sharded (nothing is gathered): its parameters become empty tensors and the
  /// shards stay the state, used again by this Trainer's next fit/validate/test/predict on it.
  void teardown(LightningModule& module) override;
  /// Gathers the module back whole on every rank (collective, one unit at a time) and ends the
  /// sharding; afterwards it is an ordinary module. No-op for a module this strategy does not hold.
  void unshard_module(LightningModule& module) override;
  std::string describe_module(LightningModule& module) override;

  torch::Tensor training_step(LightningModule& module, const Batch& batch, int64_t batch_idx) override;
  void validation_step(LightningModule& module, const Batch& batch, int64_t batch_idx, int64_t dataloader_idx) override;
  void test_step(LightningModule& module, const Batch& batch, int64_t batch_idx, int64_t dataloader_idx) override;
  Batch predict_step(LightningModule& module, const Batch& batch, int64_t batch_idx, int64_t dataloader_idx) override;
  void zero_grad(torch::optim::Optimizer& optimizer) override;
  /// optimizer_in_backward (FSDPOptions): each unit's shard steps inside backward.
  bool steps_in_backward() const override { return options_.optimizer_in_backward; }
  void set_clip_value_in_backward(std::optional<double> value) override;

  std::map<std::string, torch::Tensor> model_state_dict(LightningModule& module) override;
  /// "full": each unit's parameters and optimizer state are all-gathered in turn and rank 0 writes
  /// them (memory: one unit). "sharded": every rank writes its own flat ranges, no gathering. Either
  /// is read back as just this rank's ranges, whatever world size, wrap policy or sharding
  /// strategy wrote it.
  std::string checkpoint_format() const override { return options_.state_dict_type.text(); }
  StateLayout state_layout(LightningModule& module, const OptimizerList& optimizers) override;

  // ---- introspection (tests, summaries, benchmarks) -------------------------------------------
  struct UnitInfo {
    std::string name;  // module path ("" = root)
    int64_t numel, padded_numel, shard_numel;
    size_t unsharded_bytes;  // storage the gathered buffer holds right now
    size_t shard_bytes;      // this rank's shard (fp32 master weights, or 16-bit under "-true")
  };
  std::vector<UnitInfo> units() const;
  int64_t shard_group_size() const { return mesh_.shard_size(); }
  /// optimizer_in_backward: the units stepped in the last sync backward, and how many while
  /// autograd still ran (zeros otherwise).
  detail::FSDPSchedule::BackwardSteps backward_steps() const {
    return schedule_ ? schedule_->backward_steps() : detail::FSDPSchedule::BackwardSteps{};
  }
  const FSDPOptions& options() const { return options_; }

 protected:
  void run_backward(LightningModule& module, const torch::Tensor& loss, bool sync_gradients) override;
  void after_optimizer_step() override;
  /// Under optimizer_in_backward the step already ran inside backward: nothing to do.
  void run_optimizer_step(torch::optim::Optimizer& optimizer) override;
  double reduce_grad_norm_sq(double local) override;

 private:
  /// How this strategy's units make their FlatParams (shard group, dtypes, device, offload).
  detail::FlatParamSpec flat_param_spec() const;
  /// Over the world group (none in one process), with sync_module_states.
  detail::RankAgreement rank_agreement();
  /// The ranks agree on the module's values that no wrap() has sharded yet.
  void agree_before_sharding(LightningModule& module);
  detail::FSDPScheduleOptions schedule_options() const;

  detail::DeferredUnits deferred_;  // made by wrap() before the model was complete; built into units at set-up
  FSDPOptions options_;
  detail::FSDPMesh mesh_;
  detail::FSDPDtypes dtypes_;                         // resolved after mesh_, whose ConfigErrors come first
  std::unique_ptr<detail::FSDPSchedule> schedule_;    // set up by setup_module, gone after unshard_module
  LightningModule* sharded_ = nullptr;                // the module schedule_ shards (borrowed)
  std::unique_ptr<detail::BackwardStepper> stepper_;  // optimizer_in_backward (schedule_ borrows it)
  std::optional<double> clip_value_;                  // clipping by value inside backward
  /// Inside a manual-optimization training_step: backward and optimizer steps happen there, and the
  /// root must be gathered (fresh) for each forward that follows them.
  bool manual_step_ = false;
};

}  // namespace volt
