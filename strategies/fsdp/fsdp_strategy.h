#pragma once
/// FSDPStrategy: fully sharded data parallel. The auto_wrap_policy picks units (HookedModules);
/// each unit's parameters are flattened and sharded across the shard group (FlatParam), the
/// optimizer steps only this rank's shard (so its state is sharded too), and an interceptor around
/// each unit's forward gathers its parameters just before they are needed and frees them after.
///
/// Where things happen (a newcomer's map):
///   all-gather before forward ........ FSDPUnitInterceptor::around -> FlatParam::unshard
///   free after forward (FULL_SHARD) .. FSDPUnitInterceptor::around -> FlatParam::reshard
///   gather again before backward ..... the hook on the unit's output (pre-backward)
///   reduce-scatter after backward .... grad-accumulator hooks -> FSDPStrategy::on_unit_grads_ready
///                                      -> FlatParam::reduce_gradients
///   prefetch ......................... FSDPStrategy::prefetch_after (forward / backward order)
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
#include <vector>

#include "volt/strategies/fsdp/flat_param.h"
#include "volt/strategies/parallel_strategy.h"

namespace torch::autograd {
struct Node;
}

namespace volt {

class FSDPStrategy : public ParallelStrategy {
 public:
  FSDPStrategy(Precision precision, std::string accelerator, int64_t devices, int64_t num_nodes, FSDPOptions options);
  ~FSDPStrategy() override;
  std::string name() const override { return "fsdp"; }
  std::string precision_unsupported_reason(const Precision& p) const override;

  void setup_environment() override;
  void setup_module(LightningModule& module) override;
  void setup_optimizer(LightningModule& module, OptimizerConfig& config) override;
  void teardown(LightningModule& module) override;
  std::string describe_module(LightningModule& module) override;

  torch::Tensor training_step(LightningModule& module, const Batch& batch, int64_t batch_idx) override;
  void validation_step(LightningModule& module, const Batch& batch, int64_t batch_idx) override;
  void test_step(LightningModule& module, const Batch& batch, int64_t batch_idx) override;
  void backward(LightningModule& module, const torch::Tensor& loss, bool sync_gradients) override;
  void zero_grad(torch::optim::Optimizer& optimizer) override;

  std::map<std::string, torch::Tensor> model_state_dict(LightningModule& module) override;
  std::string checkpoint_format() const override { return options_.state_dict_type; }
  /// "full": each unit's parameters and optimizer state are all-gathered in turn and rank 0 writes
  /// them (memory: one unit). "sharded": every rank writes its own flat ranges, no gathering.
  void save_checkpoint(LightningModule& module, torch::optim::Optimizer* optimizer, const Checkpoint& header,
                       const std::string& path) override;
  /// Reads just this rank's ranges of every parameter (and of its optimizer state), from either
  /// format, whatever world size, wrap policy or sharding strategy wrote it.
  void load_checkpoint(LightningModule& module, torch::optim::Optimizer* optimizer,
                       const CheckpointReader& checkpoint) override;

  // ---- introspection (tests, summaries, benchmarks) -------------------------------------------
  struct UnitInfo {
    std::string name;  // module path ("" = root)
    int64_t numel, padded_numel, shard_numel;
    size_t unsharded_bytes;  // storage the gathered buffer holds right now
  };
  std::vector<UnitInfo> units() const;
  int64_t shard_group_size() const { return shard_size_; }
  const FSDPOptions& options() const { return options_; }

  // Called by the unit interceptor.
  void pre_forward(size_t unit);
  void post_forward(size_t unit, const torch::Tensor& output);
  void on_unit_grads_ready(size_t unit);

 protected:
  double reduce_grad_norm_sq(double local) override;
  NamedTensors optimizer_params(LightningModule& module) override;

 private:
  ProcessGroup* shard_pg();
  ProcessGroup* replicate_pg();
  void unshard(size_t unit);
  void reshard(size_t unit);
  void prefetch_after(size_t unit, bool backward);
  void prefetch_backward(size_t unit);
  void finish_backward();
  void install_grad_hooks(size_t unit);
  bool may_prefetch() const;
  /// Optimizer state fields present on any rank (collective), in kStateFields order.
  std::vector<std::string> optimizer_fields(torch::optim::Optimizer& optimizer);
  void save_full(LightningModule& module, torch::optim::Optimizer* optimizer, const Checkpoint& header,
                 const std::string& path);
  void save_sharded(LightningModule& module, torch::optim::Optimizer* optimizer, const Checkpoint& header,
                    const std::string& path);

  FSDPOptions options_;
  at::ScalarType param_dtype_ = at::kFloat;
  at::ScalarType reduce_dtype_ = at::kFloat;
  std::optional<at::ScalarType> buffer_dtype_;
  int64_t shard_size_ = 1, replicate_size_ = 1;
  std::unique_ptr<ProcessGroup> shard_group_, replicate_group_;

  struct Unit {
    std::string name;
    torch::nn::Module* module = nullptr;
    std::unique_ptr<detail::FlatParam> flat;
    int64_t grads_pending = 0;
    int64_t grads_expected = 0;
    bool reduced = false;     // this backward's gradients handled (reduced, or kept on a micro-step)
    bool has_frozen = false;  // holds a parameter with requires_grad false
  };
  std::vector<Unit> units_;  // units_[0] is the root
  std::vector<size_t> forward_order_, current_order_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  bool sync_ = true;
  bool in_backward_ = false;
  LightningModule* module_ = nullptr;
};

}  // namespace volt
