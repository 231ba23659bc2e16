#pragma once
/// Shared base of the multi-process strategies (DDP, FSDP): finds or launches the ranks (on several
/// nodes too: ClusterEnv, Launcher), owns the world process group and the DeviceMesh the strategy's
/// groups come from, implements the collectives and distributed sampling.
#include <memory>

#include "volt/distributed/device_mesh.h"
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
  std::vector<torch::Tensor> all_gather_list(const torch::Tensor& t) override;
  void barrier(const std::string& name) override;
  /// Throws DistributedError naming the rank if a launched rank (rank 0 of a self-launched job) has
  /// failed; does not wait. The launcher waits for its ranks when the strategy is destroyed.
  void finalize() override;
  /// On the process that launched this node's ranks (local rank 0 of a self-launched job): waits
  /// until every launched rank has ended, then throws DistributedError naming the first that failed.
  /// Call once its work is done (Trainer::wait_for_ranks); elsewhere a no-op.
  void wait_for_ranks();
  void on_exception(const std::exception& error) override;

  /// A YAML map every rank must hold alike, compared by the rendezvous of setup_environment
  /// (ProcessGroupOptions::job_config); the Trainer gives its options (trainer/config_agreement.h).
  void set_job_config(std::string yaml) { job_config_ = std::move(yaml); }

  ProcessGroup& process_group();
  /// The mesh of mesh_layout(), built with the world group.
  DeviceMesh& device_mesh();
  const ClusterEnv& cluster_env() const { return env_; }

 protected:
  /// The mesh this strategy's groups come from; by default one dimension, "dp", over the world.
  virtual MeshLayout mesh_layout() const;
  /// Broadcasts every parameter and buffer from rank 0 so all ranks start equal.
  void broadcast_module(torch::nn::Module& module);

  int64_t devices_;
  int64_t num_nodes_;
  std::chrono::milliseconds timeout_;
  std::string backend_;
  ClusterEnv env_;
  std::unique_ptr<Launcher> launcher_;
  std::unique_ptr<ProcessGroup> pg_;
  std::unique_ptr<DeviceMesh> mesh_;
  std::string job_config_;

 private:
  /// Starts this node's ranks (no cluster launcher), or checks the cluster's layout against
  /// devices x num_nodes.
  void launch_or_check();
};

}  // namespace volt
