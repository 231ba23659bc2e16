#pragma once
/// DDPStrategy: every rank holds the whole model; gradients are averaged with all-reduce in buckets
/// of about bucket_cap_mb, launched from gradient-accumulator hooks while backward is still running
/// (communication overlaps computation), in the reverse order of registration as PyTorch's DDP, and
/// always in bucket order on every rank. No communication on gradient-accumulation micro-steps.
///
/// Parameters without a gradient (PyTorch's meanings of the options):
/// - find_unused_parameters false (default): every parameter that requires grad must get one on
///   every rank; otherwise every rank throws TrainingError naming the parameters and ranks.
/// - find_unused_parameters true: a parameter unused on some ranks gets the mean with zeros from
///   those; one unused on every rank keeps its gradient untouched (undefined after zero_grad).
/// - static_graph true: the used set is learned on the first synchronized step and must not change
///   (TrainingError naming the parameter); buckets of parameters known unused are sent at once.
/// - gradient_as_bucket_view true: parameters' .grad are views into the persistent bucket tensors,
///   so the gradients are not held a second time while they are reduced.
/// The buckets hold the parameters that require grad when the module is set up; one frozen since
/// is skipped (no gradient expected); one trainable since (a finetuning callback's unfreeze) makes
/// every rank rebuild its buckets before the next backward.
/// Which parameters got a gradient travels in a few extra elements of the last bucket: no collective
/// of its own, and every rank reaches the same decision before any of them throws.
/// Thread-safety: as Strategy (the hooks run on the thread that calls backward).
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "volt/strategies/parallel_strategy.h"

namespace torch::autograd {
struct Node;
}

namespace volt {

class DDPStrategy : public ParallelStrategy {
 public:
  DDPStrategy(Precision precision, std::string accelerator, int64_t devices, int64_t num_nodes, DDPOptions options);
  ~DDPStrategy() override;
  std::string name() const override { return "ddp"; }

  void setup_module(LightningModule& module) override;
  void teardown(LightningModule& module) override;

  /// Number of gradient buckets (after setup_module).
  size_t num_buckets() const { return buckets_.size(); }
  /// The bucket tensors (gradient_as_bucket_view: the storage the parameters' .grad point into;
  /// otherwise empty between steps). For tests and memory accounting.
  std::vector<torch::Tensor> bucket_tensors() const;

 protected:
  void run_backward(LightningModule& module, const torch::Tensor& loss, bool sync_gradients) override;

 private:
  /// One parameter: its place in a bucket and what this step has seen of it.
  struct Slot {
    std::string name;
    torch::Tensor param;
    size_t bucket = 0;
    int64_t offset = 0;    // in the bucket's flat tensor
    torch::Tensor view;    // gradient_as_bucket_view: its gradient's place in the bucket
    bool used = false;     // got a gradient since the last synchronized step
    bool ready = false;    // counted towards its bucket this step
    bool expected = true;  // static_graph after the first step: used on that step
  };
  struct Bucket {
    std::vector<size_t> slots;
    int64_t numel = 0;  // gradient elements (the last bucket's flat tensor has the used-flags after them)
    torch::Tensor flat;
    int64_t pending = 0;
    bool launched = false;
    CollectiveWork work;
  };
  /// Slots and buckets for the parameters that require grad now; hooks on the ones new to it.
  void build_buckets(LightningModule& module);
  /// Whether a parameter requires grad that has no slot (frozen when the buckets were built).
  bool trainable_set_grew(LightningModule& module) const;
  void on_grad_ready(size_t slot);
  /// Launches, in bucket order, every bucket whose gradients are all ready (never the last one:
  /// it goes after backward, with the used flags).
  void launch_ready();
  void launch(size_t bucket);
  /// The flags every rank adds to the last bucket: per parameter, then per rank (see ddp.cpp).
  torch::Tensor local_flags() const;
  /// Waits for every bucket, agrees on unused parameters, writes the averaged gradients back.
  void finish_sync();
  bool static_learned() const { return options_.static_graph && static_learned_; }

  DDPOptions options_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  std::vector<char> static_global_used_;  // static_graph: used on some rank in the first step
  bool static_learned_ = false;
  size_t next_bucket_ = 0;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // keep hooks alive
  std::set<const c10::TensorImpl*> hooked_;                           // parameters with a hook
  std::unordered_map<const c10::TensorImpl*, size_t> slot_of_;        // parameter -> its slot now
  bool sync_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // hooks hold it weakly
};

}  // namespace volt
