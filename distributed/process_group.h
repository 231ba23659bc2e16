#pragma once
/// volt's process group: c10d's TCPStore rendezvous plus Gloo (CPU tensors) or NCCL (CUDA tensors),
/// behind calls that hide Gloo's gaps (libtorch-facts.md):
///   - no AVG: SUM, then divide;
///   - no flat all-gather: one all-to-all straight into the flat output;
///   - no reduce-scatter: all-to-all of the chunks, then a local sum — (N-1)/N of the data per
///     rank, the same traffic as a real reduce-scatter (allreduce + narrow would move twice that);
///   - no bf16/fp16 reduction: reduce in fp32; pure data movement (all-gather, all-to-all,
///     broadcast) sends bf16 bits as fp16 (same width, no arithmetic) so it stays half the bytes.
/// Every failure becomes a DistributedError naming the collective, the rank and the cause.
///
/// The pieces live beside it: the rendezvous (rendezvous.h), backend construction and the network
/// device (backend.h, network_interface.h), Gloo's missing collectives (gloo_collectives.h), pending
/// work (collective_work.h), timing (comm_clock.h) and liveness (peer_watchdog.h).
///
/// RAII: the constructor rendezvouses (all ranks must construct it), the destructor releases the
/// backend. Thread-safety: collectives must be issued in the same order on every rank; one thread
/// issues them, async work may complete on Gloo's threads.
#include <torch/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "volt/distributed/cluster_env.h"
#include "volt/distributed/collective_work.h"
#include "volt/distributed/comm_clock.h"
#include "volt/distributed/peer_watchdog.h"
#include "volt/distributed/reduce_op.h"

namespace c10d {
class Store;
}  // namespace c10d

namespace volt {

struct ProcessGroupOptions {
  std::string backend;  // "gloo", "nccl"; "" = by device
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  /// Rank 0 polls it while waiting for the other ranks to join: a non-empty answer (a launched rank
  /// that died, say) ends the wait at once with a DistributedError carrying it. Optional.
  std::function<std::string()> peer_failure;
  /// Heartbeats between the ranks (distributed/peer_watchdog.h); its timeout is capped at `timeout`.
  LivenessOptions liveness;
  /// A YAML map every rank must hold alike (the trainer options: trainer/config_agreement.h),
  /// compared by the rendezvous before any backend connects: a rank whose map differs from rank 0's
  /// makes every rank throw ConfigError naming the first differing key. "": not compared.
  std::string job_config;
};

class ProcessGroup {
 public:
  /// The world group: rendezvous at env.master_addr:env.port, on the network device that reaches
  /// it (or GLOO_SOCKET_IFNAME's).
  ProcessGroup(const ClusterEnv& env, ProcessGroupOptions options, const std::string& device_type = "cpu");
  /// A sub-group of `parent` containing `ranks` (global ranks, sorted); every member must call it
  /// with the same ranks and tag. Non-members must not call it. It uses the world group's device.
  ProcessGroup(ProcessGroup& parent, const std::vector<int64_t>& ranks, const std::string& tag);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int64_t rank() const { return rank_; }
  int64_t size() const { return size_; }
  const std::string& backend() const { return backend_name_; }
  /// The backend and the network device it uses: "gloo on eth0 (10.231.0.2), the route to ...".
  std::string transport() const;
  /// This group's rank -> global rank.
  int64_t global_rank(int64_t group_rank) const { return ranks_.empty() ? group_rank : ranks_[group_rank]; }

  /// In-place all-reduce (any dtype; bf16/fp16 reduced in fp32 on Gloo).
  void all_reduce(torch::Tensor& t, ReduceOp op);
  CollectiveWork all_reduce_async(torch::Tensor& t, ReduceOp op);
  /// Gathers every rank's `shard` (same numel) into `flat` (numel = size * shard numel), in rank order.
  void all_gather(torch::Tensor& flat, const torch::Tensor& shard);
  CollectiveWork all_gather_async(torch::Tensor& flat, const torch::Tensor& shard);
  /// `full` (numel divisible by size) is reduced across ranks; this rank's chunk goes to `shard`.
  void reduce_scatter(torch::Tensor& shard, const torch::Tensor& full, ReduceOp op);
  /// As reduce_scatter, returning at once: `shard` holds the result after wait(). Both tensors
  /// must stay alive until then (the work keeps the buffers it needs).
  CollectiveWork reduce_scatter_async(torch::Tensor& shard, const torch::Tensor& full, ReduceOp op);
  void broadcast(torch::Tensor& t, int64_t src_group_rank = 0);
  void barrier(const std::string& name = "barrier");
  /// Every rank's tensor of the same shape, gathered into a list (small metadata exchanges).
  std::vector<torch::Tensor> all_gather_list(const torch::Tensor& t);

  /// Tells every peer that this rank failed with `what` (they stop at their next collective, naming
  /// it, instead of waiting for it); no-op in a world of one.
  void report_failure(const std::string& what);

  /// Bytes this rank sent in collectives since construction (counting, for benchmarks).
  int64_t bytes_sent() const { return bytes_sent_; }
  void reset_bytes_sent() { bytes_sent_ = 0; }
  /// Bytes and times since the last reset_comm_stats() (or construction). Call from the issuing
  /// thread once its collectives are waited on.
  CommStats comm_stats() const;
  void reset_comm_stats();

 private:
  [[noreturn]] void fail(const std::string& collective, const std::exception& e) const;
  /// Throws DistributedError naming `collective` if a peer is known to have failed.
  void check_peers(const char* collective) const;
  /// check_peers, then the scope marks this thread blocked in `collective`.
  PeerWatchdog::Blocked enter(const std::string& collective) const;
  /// The tensor the backend can move: itself, or a CUDA copy of a CPU tensor on NCCL.
  torch::Tensor on_wire_device(const torch::Tensor& t) const;
  std::string describe(const std::string& collective) const;

  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t rank_ = 0;
  int64_t size_ = 1;
  std::vector<int64_t> ranks_;  // empty for the world group
  std::string backend_name_;
  bool nccl_ = false;
  std::string tag_ = "world";
  int64_t bytes_sent_ = 0;
  std::chrono::milliseconds timeout_;
};

}  // namespace volt
