#pragma once
/// Strategy: how a model is placed, stepped and saved across devices and processes. The Trainer
/// talks only to this interface, so single device, DDP and FSDP are one line of config apart.
///
/// A Strategy owns its process group (if any), its Precision and its checkpoint I/O. Ask the
/// supports_*() questions before training; the Trainer does, so a bad combination fails at once.
/// Thread-safety: one Strategy drives one training thread.
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "volt/checkpoint/checkpoint.h"
#include "volt/checkpoint/checkpoint_reader.h"
#include "volt/checkpoint/optimizer_state.h"
#include "volt/checkpoint/state_io.h"
#include "volt/distributed/reduce_op.h"
#include "volt/module/data.h"
#include "volt/module/lr_scheduler.h"
#include "volt/profiler/profiler.h"
#include "volt/strategies/precision.h"
#include "volt/strategies/strategy_options.h"

namespace volt {

class LightningModule;
namespace detail {
class CudaGraphs;
}

class Strategy {
 public:
  Strategy(Precision precision, std::string accelerator);
  virtual ~Strategy() = default;
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;

  virtual std::string name() const = 0;

  // ---- capabilities: asked by the Trainer before training starts -----------------------------
  virtual bool supports_gradient_clipping(GradientClipAlgorithm algorithm) const { return true; }
  /// True when the optimizer steps inside backward, each piece as soon as its gradient is ready
  /// (FSDP's optimizer_in_backward): optimizer_step() then runs the hooks but steps nothing, and
  /// the Trainer refuses what needs every gradient before a step (clipping by norm, 16-mixed's
  /// skipped steps, manual optimization, several optimizers).
  virtual bool steps_in_backward() const { return false; }
  /// With steps_in_backward: trainer.gradient_clip_val under algorithm "value", which must then be
  /// applied to each piece before its step inside backward (nullopt: no clipping). Set by the
  /// Trainer before fit.
  virtual void set_clip_value_in_backward(std::optional<double> value) {}
  /// An empty string means the strategy can run this precision; otherwise the reason it cannot.
  virtual std::string precision_unsupported_reason(const Precision&) const { return {}; }
  /// An empty string means trainer.cuda_graph can run with this strategy as configured; otherwise
  /// the reason it cannot (asked before setup_module when cuda graphs are on).
  virtual std::string cuda_graph_unsupported_reason() const;
  /// trainer.cuda_graph (strategies/cuda_graphs/cuda_graphs.h): setup_module installs the graphs,
  /// training_step counts each step's calls, teardown removes them. Set before setup_module.
  void enable_cuda_graphs(bool on) { cuda_graphs_on_ = on; }

  // ---- environment ------------------------------------------------------------------------
  /// Creates process groups etc. Called once, before the model is touched.
  virtual void setup_environment() {}
  virtual int64_t global_rank() const { return 0; }
  virtual int64_t world_size() const { return 1; }
  bool is_global_zero() const { return global_rank() == 0; }
  torch::Device root_device() const;
  /// The batch as the steps see it (Lightning's batch transfer): the module's
  /// on_before_batch_transfer, transfer_batch_to_device to root_device() and
  /// on_after_batch_transfer, then floating tensors cast to the parameter dtype under
  /// "bf16-true"/"16-true" (Lightning's convert_input; integer tensors such as token ids are left
  /// alone). The loops call it once per batch, before the batch-start hooks; the *_step functions
  /// below take its result.
  Batch batch_to_device(LightningModule& module, const Batch& batch, int64_t dataloader_idx) const;
  const Precision& precision() const { return precision_; }
  /// The precision's state (the loss scaler of "16-mixed"), for checkpoints.
  Precision& precision() { return precision_; }
  const std::string& accelerator() const { return accelerator_; }

  // ---- model, optimizer, data -------------------------------------------------------------
  /// Moves the model to its device and dtype; distributed strategies broadcast or shard it.
  virtual void setup_module(LightningModule& module);
  /// LightningModule::wrap during configure_model(): `unit` (a HookedModule, complete) becomes a
  /// unit of the strategy now, before the rest of the model exists. FSDP shards it at once;
  /// others do nothing. Collective where the strategy's set-up is (every rank wraps the same
  /// modules in the same order).
  virtual void wrap(torch::nn::Module& unit) {}
  /// Adapts the optimizer configure_optimizers returned (FSDP points it at the shards).
  virtual void setup_optimizer(LightningModule& module, OptimizerConfig& config) {}
  /// Restricts a loader to this rank's share (distributed strategies).
  /// Restricts `loader` to this rank's share (a no-op on one process). `pad`: every rank gets the
  /// same number of batches, repeating samples (DistributedSampler); false: every sample once.
  virtual void setup_dataloader(DataLoader& loader, bool pad = true) {}
  /// Undoes setup_module's changes to the module (interceptors) at the end of fit/validate/test/
  /// predict. FSDP keeps it sharded (see unshard_module). Overrides call this base last (it
  /// removes activation checkpointing).
  virtual void teardown(LightningModule& module);
  /// Gives a module this strategy keeps sharded after teardown (FSDP) its full parameters again on
  /// every rank (a collective: every rank calls it). Others: nothing to do.
  virtual void unshard_module(LightningModule& module) {}
  /// Activation checkpointing for the submodules `policy` picks, installed by setup_module
  /// (make_strategy sets it from the config; `config_key` names the policy in errors).
  void set_activation_checkpointing(ModulePolicy policy, std::string config_key);
  const ModulePolicy& activation_checkpointing() const { return ac_policy_; }
  /// Called by the Trainer at the end of fit/validate/test on every rank: throws DistributedError
  /// naming the rank if a process this strategy launched has failed. Does not wait.
  virtual void finalize() {}
  /// Called by the Trainer on this rank when fit fails with `error` (Lightning's on_exception):
  /// distributed strategies tell the other ranks, which stop naming this rank instead of waiting
  /// for it in their next collective. Must not throw.
  virtual void on_exception(const std::exception& error) {}
  /// The profiler that times the strategy's phases (profiler/profiler.h), lent by the Trainer;
  /// nullptr (the default) turns the marks off.
  void set_profiler(Profiler* profiler) { profiler_ = profiler; }
  Profiler* profiler() const { return profiler_; }
  /// Extra lines for the model summary (FSDP: its units and the bytes each rank holds).
  virtual std::string describe_module(LightningModule& module) { return {}; }

  // ---- one step ---------------------------------------------------------------------------
  /// Runs module.training_step under the strategy's forward context (precision, FSDP root gather).
  virtual torch::Tensor training_step(LightningModule& module, const Batch& batch, int64_t batch_idx);
  virtual void validation_step(LightningModule& module, const Batch& batch, int64_t batch_idx, int64_t dataloader_idx);
  virtual void test_step(LightningModule& module, const Batch& batch, int64_t batch_idx, int64_t dataloader_idx);
  virtual Batch predict_step(LightningModule& module, const Batch& batch, int64_t batch_idx, int64_t dataloader_idx);
  /// Backward of `loss` (scaled by the precision first under "16-mixed"); `sync_gradients` is false
  /// on gradient-accumulation micro-steps.
  void backward(LightningModule& module, const torch::Tensor& loss, bool sync_gradients);
  /// Clips the optimizer's gradients (by total norm or by value); returns the total norm before clipping
  /// (computed across ranks when gradients are sharded).
  double clip_gradients(torch::optim::Optimizer& optimizer, double value, GradientClipAlgorithm algorithm);
  /// The L2 norm of every gradient the optimizer holds, across ranks where they are sharded.
  virtual double gradient_norm(torch::optim::Optimizer& optimizer);
  /// One optimizer step as the precision runs it: unscale (16-mixed), `before_step` (the hooks and
  /// clipping, which see true gradients), then the step unless a gradient was inf/nan on some rank.
  /// The step itself (run_optimizer_step): torch::optim::Adam/AdamW with a fused step where one
  /// applies (optim/fused_adam.h: volt's single pass over fp32 host tensors, PyTorch's fused kernel
  /// on CUDA with LibTorch 2.1+), anything else with its own step(). Returns whether the optimizer
  /// stepped.
  bool optimizer_step(
      torch::optim::Optimizer& optimizer, const std::function<void()>& before_step = [] {});
  virtual void zero_grad(torch::optim::Optimizer& optimizer);

  // ---- collectives (identity on one process) -------------------------------------------------
  virtual torch::Tensor all_reduce(const torch::Tensor& t, ReduceOp op = ReduceOp::Mean) { return t; }
  virtual torch::Tensor broadcast(const torch::Tensor& t, int64_t src = 0) { return t; }
  /// `t` of every rank stacked on a new first dimension, in rank order (every rank passes the same
  /// shape and dtype). With sync_grads the result is differentiable: this rank's input receives the
  /// sum over ranks of the gradients of its slice (torch.distributed.nn's all_gather).
  torch::Tensor all_gather(const torch::Tensor& t, bool sync_grads = false);
  /// Every rank's `t`, in rank order (identity on one process).
  virtual std::vector<torch::Tensor> all_gather_list(const torch::Tensor& t) { return {t}; }
  virtual void barrier(const std::string& name = "") {}
  /// True on every rank if `decision` is true on all (all=true) or on any (all=false) rank.
  bool reduce_boolean_decision(bool decision, bool all = true);

  // ---- checkpoints ----------------------------------------------------------------------
  /// The full model state with the user's parameter and buffer names, on every rank (gathered if
  /// sharded): for inspection, tests and export. Checkpoints stream instead (save_checkpoint).
  virtual std::map<std::string, torch::Tensor> model_state_dict(LightningModule& module);
  /// How this rank holds the module's (and, unless `optimizers` is empty, the optimizers') state, for
  /// checkpoint/ to write or read (checkpoint/state_layout.h). Default: whole tensors.
  virtual StateLayout state_layout(LightningModule& module, const OptimizerList& optimizers);
  /// The format save_checkpoint writes: "full", or "sharded" (FSDP with state_dict_type sharded).
  virtual std::string checkpoint_format() const { return "full"; }
  /// Writes a checkpoint of state_layout() at `path` through checkpoint/state_io.h; every rank must
  /// call it. `header` carries epoch, step, meta and this rank's RNG states. A full checkpoint is
  /// written by rank 0 and never held whole in memory. A failure on any rank throws CheckpointError
  /// on every rank.
  void save_checkpoint(LightningModule& module, const OptimizerList& optimizers, const CheckpointHeader& header,
                       const std::string& path);
  /// Loads the model and, when `optimizers` is not empty and the checkpoint has it, the optimizer state
  /// from a checkpoint of either format saved by any strategy and world size (FSDP reads just its own
  /// shard's ranges). Throws CheckpointError naming the file on any mismatch.
  void load_checkpoint(LightningModule& module, const OptimizerList& optimizers, const CheckpointReader& checkpoint);
  /// The collectives checkpoint/ needs, over this strategy's ranks.
  StateComm& state_comm();

 protected:
  /// loss.backward() with the strategy's gradient synchronization (DDP, FSDP override it).
  virtual void run_backward(LightningModule& module, const torch::Tensor& loss, bool sync_gradients);
  /// The optimizer step itself, after unscaling, hooks and clipping: volt's fused Adam/AdamW step
  /// where it applies (optim/fused_adam.h), else optimizer.step(). FSDP's optimizer_in_backward
  /// overrides it: its steps ran inside backward.
  virtual void run_optimizer_step(torch::optim::Optimizer& optimizer);
  /// Called after every optimizer_step (FSDP refreshes a root gathered for a manual step's next forward).
  virtual void after_optimizer_step() {}
  /// Sum of a local squared norm across the ranks that hold different gradient pieces.
  virtual double reduce_grad_norm_sq(double local) { return local; }
  /// Installs trainer.cuda_graph's interceptors on the module (from setup_module).
  void setup_cuda_graphs(LightningModule& module);

  Precision precision_;
  std::string accelerator_;
  int64_t device_index_ = 0;  // CUDA device of this rank (local rank modulo the visible GPUs)
  ModulePolicy ac_policy_;
  std::unique_ptr<StateComm> state_comm_;
  Profiler* profiler_ = nullptr;  // borrowed from the Trainer
  std::string ac_key_ = "trainer.strategy.activation_checkpointing_policy";
  bool cuda_graphs_on_ = false;
  std::shared_ptr<detail::CudaGraphs> cuda_graphs_;  // while set up, with cuda_graphs_on_
};

namespace detail {
/// agree_or_throw (checkpoint/state_io.h) over the strategy's ranks.
void agree_or_throw(Strategy& s, const std::string& local_error, const std::string& what);
}  // namespace detail

/// One process, one device ("single_device"; what "auto" means with devices: 1).
class SingleDeviceStrategy : public Strategy {
 public:
  using Strategy::Strategy;
  std::string name() const override { return "single_device"; }
};

}  // namespace volt
