#pragma once
/// Datasets and the data loader. A Batch is a list of tensors (input, target, ...); the loader stacks
/// samples along a new first dimension. Batches are addressed by index within an epoch, so a resumed
/// run can skip exactly the batches already seen, and a distributed strategy only sets the rank's
/// slice (DistributedSampler semantics: same permutation as PyTorch's for the same seed and epoch,
/// padded by repetition so every rank runs the same number of batches).
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace volt {

using Batch = std::vector<torch::Tensor>;

/// A map-style dataset. Implementations must be safe to call `get` on from one thread at a time.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Batch get(int64_t index) const = 0;
};

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  bool drop_last = false;
  uint64_t seed = 0;
};

/// Owns a shared reference to its dataset. Not thread-safe; one loader per loop.
class DataLoader {
 public:
  DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options);

  /// Restricts this loader to `rank`'s share of every epoch (called by distributed strategies).
  void set_distributed(int64_t rank, int64_t world_size);
  /// Sets the epoch; with shuffle the order is randperm(seed + epoch) as in PyTorch.
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

  int64_t num_batches() const;
  /// The sample indices this rank visits this epoch, in order.
  std::vector<int64_t> indices() const;
  /// The `i`-th batch of the current epoch for this rank.
  Batch batch(int64_t i) const;

  const DataLoaderOptions& options() const { return options_; }
  const Dataset& dataset() const { return *dataset_; }
  int64_t rank() const { return rank_; }
  int64_t world_size() const { return world_size_; }

 private:
  std::shared_ptr<Dataset> dataset_;
  DataLoaderOptions options_;
  int64_t rank_ = 0;
  int64_t world_size_ = 1;
  int64_t epoch_ = 0;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_indices_;
};

/// Stacks samples into a batch (each position stacked along dim 0).
Batch collate(const std::vector<Batch>& samples);

}  // namespace volt
