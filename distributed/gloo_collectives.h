#pragma once
/// The collectives Gloo lacks, built from the ones it has (libtorch-facts.md): a flat all-gather and
/// a reduce-scatter, both as one all-to-all. ProcessGroup calls these on Gloo only; NCCL has both.
#include <torch/types.h>

#include <functional>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "volt/core/compat.h"
#include "volt/distributed/reduce_op.h"

namespace volt::detail {

/// A launched exchange: the backend's work, the bytes this rank sends, and what runs once it is
/// done (nothing, or the local sum of a reduce-scatter).
struct GlooExchange {
  c10::intrusive_ptr<c10d::Work> work;
  int64_t bytes_sent = 0;
  std::function<void()> finish;
};

/// Every rank's `shard` into `flat` (numel = size * shard numel), in rank order.
GlooExchange gloo_all_gather(compat::C10dBackend& pg, torch::Tensor& flat, const torch::Tensor& shard, int64_t rank,
                             int64_t size);
/// `full` reduced across ranks (sum or mean, in fp32); this rank's chunk into `shard` once finished.
GlooExchange gloo_reduce_scatter(compat::C10dBackend& pg, torch::Tensor& shard, const torch::Tensor& full, ReduceOp op,
                                 int64_t rank, int64_t size);

/// Data movement only: bf16 travels as fp16 bits on Gloo (which rejects bf16).
torch::Tensor as_wire(const torch::Tensor& t);

}  // namespace volt::detail
