#pragma once
/// Shared base of the multi-process strategies (DDP, FSDP): finds or launches the ranks, owns the
/// world process group, implements the collectives and distributed sampling.
#include <memory>

#include "volt/distributed/launcher.h"
#include "volt/distributed/process_group.h"
#include "volt/strategies/strategy.h"

namespace volt {

class ParallelStrategy : public Strategy {
 public:
  ParallelStrategy(Precision precision, std::string accelerator, int64_t devices, int64_t num_nodes,
                   std::chrono::milliseconds timeout, std::string backend);
  ~ParallelStrategy() override;

  void setup_environment() override;
  int64_t global_rank() const override { return env_.rank; }
  int64_t world_size() const override { return env_.world_size; }
  void setup_dataloader(DataLoader& loader, bool pad = true) override;
  torch::Tensor all_reduce(const torch::Tensor& t, ReduceOp op) override;
  torch::Tensor broadcast(const torch::Tensor& t, int64_t src) override;
  void barrier(const std::string& name) override;
  /// Throws DistributedError naming the rank if a launched rank (rank 0 of a self-launched job) has
  /// failed; does not wait. The launcher waits for its ranks when the strategy is destroyed.
  void finalize() override;
  void on_exception(const std::exception& error) override;

  ProcessGroup& process_group();
  const ClusterEnv& cluster_env() const { return env_; }

 protected:
  /// Broadcasts every parameter and buffer from rank 0 so all ranks start equal.
  void broadcast_module(torch::nn::Module& module);

  int64_t devices_;
  int64_t num_nodes_;
  std::chrono::milliseconds timeout_;
  std::string backend_;
  ClusterEnv env_;
  std::unique_ptr<Launcher> launcher_;
  std::unique_ptr<ProcessGroup> pg_;
};

}  // namespace volt
