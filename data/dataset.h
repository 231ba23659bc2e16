#pragma once
/// The two kinds of dataset a DataLoader reads, as PyTorch's:
///  - Dataset (map-style): a size and random access by index. The loader decides the order
///    (shuffle, distributed slice) and can start an epoch at any batch.
///  - IterableDataset (streaming): the loader asks for a stream of samples for one shard and reads it
///    to its end. The dataset decides the order and must split its samples by the ShardInfo it is
///    given (PyTorch's torch.utils.data.get_worker_info(), with the rank added).
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>

#include "volt/data/batch.h"

namespace volt {

/// A map-style dataset. With DataLoaderOptions::num_workers > 0 the loader calls get() from several
/// worker threads at once, so get() must be safe to call concurrently (a const read of data held in
/// memory is). For batches that do not depend on num_workers, get(i) must depend on i only (seed
/// any randomness from the index, not from a shared generator).
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Batch get(int64_t index) const = 0;
};

/// Which part of an iterable dataset one stream reads: worker `worker_id` of `num_workers` on rank
/// `rank` of `world_size` reads shard `shard()` of `num_shards()` (= rank * num_workers +
/// worker_id of world_size * num_workers). num_workers is 1 when the loader loads on the calling
/// thread (DataLoaderOptions::num_workers = 0).
struct ShardInfo {
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t worker_id = 0;
  int64_t num_workers = 1;
  /// The loader's epoch and seed, for datasets that shuffle their stream (shuffle by seed + epoch
  /// to get the same order on every run).
  int64_t epoch = 0;
  uint64_t seed = 0;

  int64_t shard() const { return rank * num_workers + worker_id; }
  int64_t num_shards() const { return world_size * num_workers; }
  /// Strided split of a stream: this shard reads the samples k with k % num_shards() == shard().
  bool owns(int64_t k) const { return k % num_shards() == shard(); }
  /// Contiguous split of `n` samples: [first, last) for this shard, the earlier shards one longer
  /// when n does not divide. Holds as many samples as owns() selects (shard_size()).
  std::pair<int64_t, int64_t> range(int64_t n) const;
  /// The number of samples of `n` that shard `s` of `shards` holds under either split above.
  static int64_t shard_size(int64_t n, int64_t s, int64_t shards);
};

/// PyTorch's name for it.
using WorkerInfo = ShardInfo;

/// One shard's samples, read once from the start. next() returns nullopt at the end. Created and
/// read on one worker thread; it need not be thread-safe.
class SampleStream {
 public:
  virtual ~SampleStream() = default;
  virtual std::optional<Batch> next() = 0;

  /// A stream whose next() is `fn` (a generator lambda holding its own position).
  static std::unique_ptr<SampleStream> from(std::function<std::optional<Batch>()> fn);
};

/// A streaming dataset. stream(shard) must return only that shard's samples: the streams of all
/// shards of one epoch together are the dataset, each sample in exactly one of them (split with
/// ShardInfo::owns or ShardInfo::range). The loader batches each stream on its own (batch_size
/// samples of one shard per batch; drop_last per shard) and interleaves the workers' batches round
/// robin, so the order of batches depends on num_workers (as in PyTorch).
///
/// stream() is called from the worker threads, several at once: it must be safe to call
/// concurrently.
class IterableDataset {
 public:
  virtual ~IterableDataset() = default;
  virtual std::unique_ptr<SampleStream> stream(const ShardInfo& shard) const = 0;
  /// The number of samples over all shards, when known (PyTorch's optional __len__). The loader's
  /// num_batches() derives each shard's batch count from it, assuming the split of ShardInfo::owns /
  /// ShardInfo::range; the end of the streams ends the epoch regardless.
  virtual std::optional<int64_t> size() const { return std::nullopt; }
};

}  // namespace volt
