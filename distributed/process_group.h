#pragma once
/// volt's process group: c10d's TCPStore rendezvous plus Gloo (CPU tensors) or NCCL (CUDA tensors),
/// behind calls that hide Gloo's gaps (libtorch-facts.md):
///   - no AVG: SUM, then divide;
///   - no flat all-gather: list all-gather into views of the flat output;
///   - no reduce-scatter: all-to-all of the chunks, then a local sum — (N-1)/N of the data per
///     rank, the same traffic as a real reduce-scatter (allreduce + narrow would move twice that);
///   - no bf16/fp16 reduction: reduce in fp32; pure data movement (all-gather, all-to-all,
///     broadcast) sends bf16 bits as fp16 (same width, no arithmetic) so it stays half the bytes.
/// Every failure becomes a DistributedError naming the collective, the rank and the cause.
///
/// RAII: the constructor rendezvouses (all ranks must construct it), the destructor releases the
/// backend. Thread-safety: collectives must be issued in the same order on every rank; one thread
/// issues them, async work may complete on Gloo's threads.
#include <torch/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "volt/distributed/cluster_env.h"
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
};

/// What a group's collectives cost this rank since the last reset (benchmarks read it to show the
/// communication hidden behind computation).
struct CommStats {
  int64_t bytes_sent = 0;
  /// Σ over collectives of launch → completion: overlapping collectives add up. Timed on Gloo
  /// (completion is seen on its threads); on NCCL the host cannot see completion, so it is 0.
  double busy_seconds = 0;
  /// Time the issuing thread spent blocked on collectives (waits and synchronous calls).
  double blocked_seconds = 0;
  /// Communication that ran while the issuing thread did something else: busy - blocked (>= 0).
  double hidden_seconds() const { return busy_seconds > blocked_seconds ? busy_seconds - blocked_seconds : 0.0; }
};

namespace detail {
struct CommClock;  // a group's counters, shared with its pending work (thread-safe)
}

/// A pending collective. wait() rethrows failures as DistributedError; `finish` (if set) runs after.
class CollectiveWork {
 public:
  CollectiveWork() = default;
  /// `clock` (optional) is charged with the collective's time: launch to completion, and the wait.
  CollectiveWork(c10::intrusive_ptr<c10d::Work> work, std::string what, std::function<void()> finish,
                 std::shared_ptr<PeerWatchdog> watchdog = nullptr, std::shared_ptr<detail::CommClock> clock = nullptr);
  void wait();
  bool valid() const { return static_cast<bool>(work_) || static_cast<bool>(finish_); }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::string what_;
  std::function<void()> finish_;
  std::shared_ptr<PeerWatchdog> watchdog_;
  std::shared_ptr<detail::CommClock> clock_;
};

class ProcessGroup {
 public:
  /// The world group: rendezvous at env.master_addr:env.port.
  ProcessGroup(const ClusterEnv& env, ProcessGroupOptions options, const std::string& device_type = "cpu");
  /// A sub-group of `parent` containing `ranks` (global ranks, sorted); every member must call it
  /// with the same ranks and tag. Non-members must not call it.
  ProcessGroup(ProcessGroup& parent, const std::vector<int64_t>& ranks, const std::string& tag);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int64_t rank() const { return rank_; }
  int64_t size() const { return size_; }
  const std::string& backend() const { return backend_name_; }
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
  /// Rank 0 of a store it serves: returns once every other rank has connected.
  void wait_for_ranks(const std::function<std::string()>& peer_failure);
  [[noreturn]] void fail(const std::string& collective, const std::exception& e) const;
  /// Gloo's all-gather: one all-to-all into `flat` (see its note).
  CollectiveWork all_gather_gloo(torch::Tensor& flat, const torch::Tensor& shard);
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
