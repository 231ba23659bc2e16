#pragma once
/// DDPStrategy: every rank holds the whole model; gradients are averaged with all-reduce in buckets
/// of about bucket_cap_mb, launched from gradient-accumulator hooks while backward is still running
/// (communication overlaps computation), in the reverse order of registration as PyTorch's DDP.
/// No communication on gradient-accumulation micro-steps.
#include <memory>
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

 protected:
  void run_backward(LightningModule& module, const torch::Tensor& loss, bool sync_gradients) override;

 private:
  struct Bucket {
    std::vector<torch::Tensor> params;
    torch::Tensor flat;
    int64_t pending = 0;
    bool launched = false;
    CollectiveWork work;
  };
  void on_grad_ready(size_t bucket);
  void launch(size_t bucket);

  DDPOptions options_;
  std::vector<Bucket> buckets_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // keep hooks alive
  bool sync_ = true;
  bool hooks_installed_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // hooks hold it weakly
};

}  // namespace volt
