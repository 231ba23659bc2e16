#pragma once
/// One call of a module's forward captured as two graphs, as torch.cuda.make_graphed_callables
/// does: the forward, and the backward of its output with respect to its inputs and parameters.
/// Later calls with the same input signature copy their inputs into the captured (static) input
/// tensors, replay the forward graph and return its output; the output's autograd node replays the
/// backward graph and hands the gradients on, so parameters accumulate them (and DDP's hooks fire)
/// as in eager training.
///
/// [Note: what a graphed call keeps equal to eager]
/// - Random numbers: warm-up and capture run between a snapshot of the generators and its
///   restoration, so the first replay draws the dropout masks eager training would have drawn.
/// - Buffers (BatchNorm's running statistics): restored after warm-up and capture.
/// - Autocast: the capture runs under the caller's autocast state, with the weight-cast cache off
///   (a cast cached during capture would live in the graph's memory).
/// - Parameters: read in place; a parameter given new memory after capture (set_data, to(), an
///   FSDP re-gather) is refused at the next call by name, never read stale.
/// - Outputs: each replay overwrites the previous call's output and saved activations, so a
///   backward after the same call ran forward again is refused (the generation check).
///
/// Ownership: shared by the interceptor and the autograd nodes of its outputs. Thread-safety: one
/// training thread (backward may run on autograd's device threads, one node at a time).
#include <torch/nn/module.h>
#include <torch/types.h>

#include <memory>
#include <string>
#include <vector>

#include "volt/core/compat.h"
#include "volt/core/hooked_module.h"
#include "volt/strategies/cuda_graphs/graph_recorder.h"

namespace volt::detail {

/// What a captured call depends on besides values: each input's presence, shape, strides, dtype,
/// device and requires_grad; which parameters require grad; the autocast state.
struct CallSignature {
  struct Input {
    bool defined = false, requires_grad = false;
    std::vector<int64_t> sizes, strides;
    at::ScalarType dtype = at::kFloat;
    at::Device device = at::kCPU;
    bool operator==(const Input& o) const {
      return defined == o.defined && requires_grad == o.requires_grad && sizes == o.sizes && strides == o.strides &&
             dtype == o.dtype && device == o.device;
    }
  };
  std::vector<Input> inputs;
  std::vector<bool> params_requiring_grad;
  bool autocast_cpu = false, autocast_cuda = false;
  at::ScalarType autocast_cpu_dtype = at::kBFloat16, autocast_cuda_dtype = at::kHalf;

  static CallSignature of(const TensorVec& inputs, const std::vector<torch::Tensor>& params);
  bool operator==(const CallSignature& o) const;
  /// How `now` differs from this one, for a message ("input 0: [8, 256] -> [5, 256]").
  std::string difference(const CallSignature& now) const;
};

class GraphedCall : public std::enable_shared_from_this<GraphedCall> {
 public:
  static constexpr int kWarmupIterations = 3;  // make_graphed_callables' default

  /// `module` must outlive the call; `name` is its path in the model ("layers.3"); `params` are
  /// module.parameters(), collected once by the caller (signature_of runs on every call).
  GraphedCall(torch::nn::Module& module, std::string name, std::vector<torch::Tensor> params, GraphRecorder& recorder);

  /// Warm-up, then the forward and backward captures, with `next` (the module's forward body).
  /// Throws ConfigError when the module cannot be captured (it reads a tensor that requires grad
  /// but is neither an input nor its own parameter; its output needs no gradient; the capture
  /// failed).
  void capture(const TensorVec& inputs, ForwardFn next);
  bool captured() const { return fwd_ != nullptr; }
  const CallSignature& signature() const { return signature_; }
  /// The signature these inputs would have (compare with signature()).
  CallSignature signature_of(const TensorVec& inputs) const;
  /// Replays the forward for these inputs (same signature as captured) and returns its output,
  /// whose backward replays the backward graph.
  torch::Tensor run(const TensorVec& inputs);

  // Used by the output's autograd node.
  /// The gradients for each input (undefined where it needs none), then each parameter.
  torch::autograd::variable_list replay_backward(const torch::Tensor& grad_output, uint64_t generation);
  size_t num_inputs() const { return static_in_.size(); }

 private:
  void check_parameters_in_place() const;
  void check_reads_only_its_own(const torch::nn::Module& module) const;

  torch::nn::Module& module_;
  std::string name_;
  std::vector<torch::Tensor> all_params_;  // module.parameters(), frozen ones included
  GraphRecorder& recorder_;
  std::vector<torch::Tensor> params_;  // requiring grad, in module.parameters() order
  std::vector<std::string> param_names_;
  std::vector<const void*> param_ptrs_;  // where params_ lived at capture
  CallSignature signature_;
  ForwardFn next_;
  TensorVec static_in_;
  std::vector<torch::Tensor> grad_targets_;  // static inputs requiring grad, then params_
  torch::Tensor static_out_, static_grad_out_;
  std::vector<torch::Tensor> static_grads_;  // one per grad target
  std::unique_ptr<RecordedWork> fwd_, bwd_;
  uint64_t generation_ = 0;  // forward replays so far
};

}  // namespace volt::detail
