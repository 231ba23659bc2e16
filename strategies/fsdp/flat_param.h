#pragma once
/// One FSDP unit's parameters, flattened. Every rank of the shard group keeps a contiguous shard of
/// the padded flat buffer (the optimizer's weights: fp32 master weights, or bf16/fp16 under a
/// "-true" precision, as the single-device model would hold them); before the unit runs, the
/// shards are all-gathered into `full` (param dtype) and the module's own parameter tensors point
/// into it (set_data at set-up, so names and identities never change); afterwards the storage of
/// `full` is released (compat::free_storage), which frees the memory even while the autograd graph
/// still references the parameters.
#include <torch/types.h>

#include <string>
#include <vector>

#include "volt/distributed/process_group.h"

namespace volt::detail {

struct FlatParamEntry {
  std::string name;     // the user's qualified name, e.g. "model.transformer.encoder.layers.0.linear1.weight"
  torch::Tensor param;  // the module's parameter (same object as named_parameters() returns)
  std::vector<int64_t> shape;
  int64_t offset = 0;  // in the flat buffer
  int64_t numel = 0;
};

/// This rank's piece of one parameter: shard[shard_offset, +length) == param.flatten()[param_offset, +length).
struct LocalSlice {
  size_t entry = 0;
  int64_t shard_offset = 0;
  int64_t param_offset = 0;
  int64_t length = 0;
  torch::Tensor view;  // a leaf view of the shard the optimizer steps (requires_grad)
};

enum class UnitState { Sharded, Gathering, Unsharded };

class FlatParam {
 public:
  /// Takes over `entries` (their current values become the initial weights).
  /// `offload` (CPU offload, for a CUDA `device`): the fp32 shard, its gradient and so the optimizer
  /// state live in pinned host memory; only the gathered parameters use the device. The shard and
  /// the gradient shard are host buffers of exact size (core/host_buffers.h: kinds "fsdp.shard" and
  /// "fsdp.grad"), page-locked in CUDA builds; with a CPU `device` the shard is such a buffer too
  /// (not page-locked), so its accounting can be checked anywhere.
  /// `shard_dtype`: the shard's (and its gradient's and so the optimizer state's) dtype.
  FlatParam(std::string unit_name, std::vector<FlatParamEntry> entries, int64_t shard_rank, int64_t shard_size,
            at::ScalarType param_dtype, torch::Device device, bool offload = false,
            at::ScalarType shard_dtype = at::kFloat);
  bool offloaded() const { return offload_; }

  const std::string& unit_name() const { return unit_name_; }
  int64_t numel() const { return numel_; }
  int64_t padded_numel() const { return padded_; }
  int64_t shard_numel() const { return padded_ / shard_size_; }
  const torch::Tensor& shard() const { return shard_; }
  std::vector<FlatParamEntry>& entries() { return entries_; }
  std::vector<LocalSlice>& slices() { return slices_; }
  UnitState state() const { return state_; }
  /// Bytes the unsharded buffer currently holds (0 when freed).
  size_t unsharded_bytes() const;
  /// Bytes of what a gather in flight sends: the shard on the device in the parameter dtype (the
  /// shard itself where that is its dtype, else a copy). 0 when no gather is in flight; at shard
  /// size 1 nothing outlives unshard_async.
  size_t send_bytes() const;

  /// Starts gathering the shards into `full` (no-op unless Sharded). `pg` null = shard size 1.
  void unshard_async(ProcessGroup* pg);
  /// Waits for a gather started by unshard_async (starting one if needed).
  void unshard(ProcessGroup* pg);
  /// Frees the unsharded storage.
  void reshard();
  /// Flattens the parameters' gradients (freeing them) and starts reduce-scattering them over
  /// `shard_pg`, without waiting. Returns whether this rank had any gradient for the unit (known on
  /// the host: no device sync). Waits first for this unit's previous reduction, if any.
  bool reduce_gradients_async(ProcessGroup* shard_pg, at::ScalarType reduce_dtype, int64_t world_size);
  /// Waits for the reduce-scatter started by reduce_gradients_async (its input is freed then).
  void wait_reduce();
  /// Completes the reduction: averages over `replicate_pg` and adds the mean to the shard gradient
  /// when `any_rank` (some rank had a gradient for this unit); otherwise drops it, leaving the shard
  /// gradient as it was. No-op without a pending reduction.
  void finish_reduce(ProcessGroup* replicate_pg, bool any_rank);
  bool reduce_pending() const { return reduce_pending_; }
  /// Whether this rank had a gradient in the pending reduction.
  bool had_local_grad() const { return local_any_; }
  /// All three in one, agreeing on the flag over both groups (tests, single units).
  void reduce_gradients(ProcessGroup* shard_pg, ProcessGroup* replicate_pg, at::ScalarType reduce_dtype,
                        int64_t world_size);
  /// The gradient of this rank's shard (the shard's dtype, shard_numel), undefined before the first reduce.
  /// Offloaded, it may still be arriving from the device: synchronize the device before reading.
  torch::Tensor& shard_grad() { return shard_grad_; }
  /// Points every slice's .grad at the shard gradient (zeros where no gradient arrived).
  void expose_slice_grads();
  /// Drops the shard gradient and the slices' .grad (optimizer_in_backward, once the unit stepped).
  /// An offloaded unit keeps its pinned gradient buffer for the next step.
  void release_grads();
  /// Leaves the shard alone but points every parameter at an empty tensor and drops gradients: a
  /// module kept sharded after fit holds nothing at full size, and code that reads a parameter by
  /// mistake gets a shape error rather than freed memory. bind_params() undoes it.
  void release_params();
  /// Points every parameter at its view of the unsharded buffer again (as at construction).
  void bind_params();
  /// The full flat values in the shard's dtype (all-gathered from the shards): state dicts,
  /// unshard_module.
  torch::Tensor gather_full(ProcessGroup* pg) const;

 private:
  std::string unit_name_;
  std::vector<FlatParamEntry> entries_;
  std::vector<LocalSlice> slices_;
  int64_t shard_rank_, shard_size_;
  int64_t numel_ = 0, padded_ = 0;
  at::ScalarType param_dtype_;
  torch::Tensor shard_;       // master shard (fp32, or the "-true" precision's dtype)
  torch::Tensor shard_grad_;  // same dtype
  torch::Tensor full_;        // param dtype, storage freed when sharded
  torch::Tensor send_;        // shard cast to param dtype for the gather
  torch::Tensor grad_host_;   // offloaded: the exact-size pinned buffer the gradient shard reuses
  bool offload_ = false;
  CollectiveWork work_;
  // A reduction in flight (reduce_gradients_async .. finish_reduce).
  CollectiveWork reduce_work_;
  torch::Tensor reduce_out_;  // fp32, shard_numel: the sum over the shard group
  double reduce_post_ = 1;    // what the sum is divided by to make the mean
  bool reduce_pending_ = false;
  bool local_any_ = false;
  UnitState state_ = UnitState::Sharded;

  void accumulate_shard_grad(const torch::Tensor& g);
  /// Copies the parameters' gradients into `flat` (zeros where none, and in the padding), freeing
  /// each; rounded through `via` (the reduce dtype) where a buffer of that dtype would round them.
  void flatten_grads(torch::Tensor& flat, at::ScalarType via);
  /// Gives `full_` its memory again (a no-op when it has it).
  void refill_full();
};

}  // namespace volt::detail
