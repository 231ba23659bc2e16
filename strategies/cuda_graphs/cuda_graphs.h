#pragma once
/// trainer.cuda_graph: the training forward and backward of each outermost HookedModule (the
/// layers a model marks with volt::hooked, or derives from HookedModule) run as CUDA graphs,
/// captured at their first call and replayed after, each with one launch instead of one per
/// kernel. Everything between them (the loss, the optimizer step, DDP's all-reduces, logging,
/// every hook) runs eagerly as before, so the step means the same as in eager training.
///
/// Calls are counted per training step: the k-th call of a module in a step replays the k-th
/// graph of that module (the demo's embedding runs twice a forward: two graphs). A call runs
/// eagerly instead when it is not inside a training step, without grad mode, in eval mode, when
/// nothing in it needs a gradient, or when its inputs differ from the captured ones (a smaller last
/// batch: drop_last keeps every batch whole); the first such call of each module is logged.
///
/// Mechanism: a ForwardInterceptor at priority 20, inside any other. What cannot be captured is
/// refused up front by the Trainer (FSDP, activation checkpointing, detect_anomaly, a CPU run) or at
/// capture by name (a host synchronization in the forward, a tensor read from outside the module);
/// see GraphedCall for what stays equal to eager.
///
/// Ownership: installed modules hold the interceptor (shared); each call's graphs live until
/// remove(). Thread-safety: one training thread.
#include <torch/nn/module.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "volt/core/hooked_module.h"
#include "volt/strategies/cuda_graphs/graph_recorder.h"
#include "volt/strategies/cuda_graphs/graphed_call.h"

namespace volt::detail {

class CudaGraphs : public ForwardInterceptor, public std::enable_shared_from_this<CudaGraphs> {
 public:
  static constexpr int kPriority = 20;
  static constexpr const char* kName = "cuda_graph";

  /// Hold it in a std::shared_ptr (apply() hands the modules shared references).
  explicit CudaGraphs(std::unique_ptr<GraphRecorder> recorder);

  /// Installs itself on the outermost HookedModules under `root` (root itself if it is one);
  /// returns how many. Modules are named by their path under `root`.
  size_t apply(torch::nn::Module& root);
  /// Removes itself from every module under `root` and drops the graphs.
  void remove(torch::nn::Module& root);

  /// The calls made while a Step is alive form one training step. Not nestable.
  class Step {
   public:
    Step() = default;
    explicit Step(CudaGraphs* graphs);
    ~Step();
    Step(Step&& o) noexcept : graphs_(o.graphs_) { o.graphs_ = nullptr; }
    Step& operator=(Step&&) = delete;
    Step(const Step&) = delete;

   private:
    CudaGraphs* graphs_ = nullptr;
  };
  Step step() { return Step(this); }

  torch::Tensor around(torch::nn::Module& module, const TensorVec& inputs, const ForwardFn& next) override;
  const char* name() const override { return kName; }

  struct Stats {
    int64_t modules = 0;   ///< modules it is installed on
    int64_t captured = 0;  ///< calls captured (one forward and one backward graph each)
    int64_t replayed = 0;  ///< calls replayed (the first run after a capture included)
    int64_t eager = 0;     ///< training calls inside a step that ran eagerly
  };
  Stats stats() const {
    Stats s = stats_;
    s.modules = static_cast<int64_t>(modules_.size());
    return s;
  }
  /// One line for the log: the counts, and why calls ran eagerly.
  std::string summary() const;

 private:
  struct PerModule {
    std::string name;
    std::vector<torch::Tensor> params;                // module.parameters(), collected once at apply()
    std::vector<std::shared_ptr<GraphedCall>> calls;  // the k-th call of a step
    size_t next_call = 0;
    std::string eager_reason;  // the first, for the log
  };
  torch::Tensor eager(PerModule& m, const TensorVec& inputs, const ForwardFn& next, std::string reason);

  std::unique_ptr<GraphRecorder> recorder_;
  std::vector<PerModule> modules_;                              // in apply() order (the summary's)
  std::unordered_map<const torch::nn::Module*, size_t> index_;  // into modules_
  bool in_step_ = false;
  Stats stats_;
};

}  // namespace volt::detail
