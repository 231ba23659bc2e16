#pragma once
/// StateLayout: how a strategy holds the model's and the optimizer's state on this rank, described
/// for checkpoint/ to write and read (state_io.h). Strategies describe; only checkpoint/ touches
/// files, so a new strategy writes no checkpoint code and a new format touches no strategy.
///
/// [Note: the three kinds of state]
///   whole tensors  every rank holds them alike (single device and DDP parameters, every buffer):
///                  rank 0 writes them; a load copies them in on every rank.
///   flat groups    FSDP units: the group's parameters stored back to back in a flat buffer of
///                  shard_size * shard_numel elements (zero padding at the end), split evenly;
///                  this rank holds piece shard_index, and its slices say which parameter ranges
///                  that is. Optimizer state follows the same layout (the optimizer steps the
///                  slices). A full save gathers one field of one group at a time (memory: one
///                  unit); a sharded save writes each rank's slices as they are.
///   rank tensors   this rank's own values (RNG states), saved as "rank<r>.<name>".
/// The manifest of a sharded checkpoint is derived from the layout: shard q of a group holds flat
/// elements [q * shard_numel, (q + 1) * shard_numel), the same arithmetic on every rank.
///
/// Ownership: the tensors are the strategy's own (views, not copies); a layout is valid until the
/// strategy's next step. Thread-safety: none.
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "volt/checkpoint/optimizer_state.h"
#include "volt/distributed/reduce_op.h"

namespace volt {

/// One parameter inside a flat group.
struct FlatEntry {
  std::string name;  // the user's qualified parameter name
  std::vector<int64_t> shape;
  int64_t offset = 0;  // in the flat buffer
  int64_t numel = 0;
};

/// This rank's piece of one entry: shard[shard_offset, +length) == entry.flatten()[param_offset, +length).
struct FlatSlice {
  size_t entry = 0;
  int64_t shard_offset = 0, param_offset = 0, length = 0;
  torch::Tensor view;  // the tensor the optimizer steps for this piece
};

struct FlatGroup {
  std::vector<FlatEntry> entries;
  std::vector<FlatSlice> slices;  // this rank's
  torch::Tensor shard;            // this rank's fp32 values of the parameters (shard_numel)
  int64_t shard_numel = 0, shard_size = 1, shard_index = 0;
  /// This rank's file holds the group's pieces (the first replica when groups are replicated).
  bool writes = true;
  /// The padded flat buffer from every shard's `local` (collective over the group's ranks).
  std::function<torch::Tensor(const torch::Tensor& local)> gather;
  /// `t` reduced over the group's ranks (collective).
  std::function<torch::Tensor(const torch::Tensor& t, ReduceOp op)> all_reduce;
};

struct StateLayout {
  NamedTensors params;   // whole parameters (the optimizer steps these tensors)
  NamedTensors buffers;  // whole buffers
  std::vector<FlatGroup> groups;
  /// The optimizers stepping these parameters (several under manual optimization); empty: the
  /// model alone (weights_only saves, loads without an optimizer).
  OptimizerList optimizers;
  /// This rank's own tensors (RNG states, "cpu" / "cuda"); saved by every rank.
  std::map<std::string, torch::Tensor> rank_tensors;
};

/// The collectives over all ranks that saving and loading need (identity in one process).
/// Implemented by the strategy that owns the process group.
class StateComm {
 public:
  virtual ~StateComm() = default;
  virtual int64_t rank() const = 0;
  virtual int64_t world_size() const = 0;
  virtual torch::Tensor all_reduce(const torch::Tensor& t, ReduceOp op) = 0;
  virtual torch::Tensor broadcast(const torch::Tensor& t, int64_t src) = 0;
};

}  // namespace volt
