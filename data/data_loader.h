#pragma once
/// DataLoader: batches of a map-style or iterable dataset for one rank, loaded on the calling thread
/// or by worker threads ahead of the consumer, with PyTorch's options and Lightning's resume.
///
///   DataLoaderOptions o;  o.batch_size = 16;  o.shuffle = true;  o.num_workers = 4;
///   DataLoader loader(dataset, o);
///   loader.set_epoch(epoch);
///   auto stream = loader.iterate(start_batch);         // exact mid-epoch resume
///   while (auto batch = stream.next()) step(*batch);
///
/// Order (map-style): shuffle is randperm(seed + epoch), as PyTorch's samplers; set_distributed gives
/// the rank its DistributedSampler slice (padded by repetition so every rank runs the same number of
/// batches). Batch i of an epoch holds the same samples whatever num_workers is: worker w loads the
/// batches i with i % num_workers == w and the stream hands them out in index order.
/// Order (iterable): worker w of rank r reads shard r * num_workers + w of world_size * num_workers
/// (IterableDataset), and the stream takes the workers' batches round robin, skipping a worker whose
/// shard has ended, as PyTorch does: the order depends on num_workers.
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "volt/core/options.h"
#include "volt/data/batch.h"
#include "volt/data/batch_stream.h"
#include "volt/data/dataset.h"

namespace volt {

namespace detail {
template <>
struct YamlCodec<uint64_t> {
  static uint64_t decode(const YAML::Node& n, const std::string& key);
  static YAML::Node encode(uint64_t v) { return YAML::Node(v); }
};
class WorkerPool;
struct PersistentWorkers;
}  // namespace detail

/// PyTorch DataLoader's options, with its names and defaults (the first four keep their order for
/// brace initialization: DataLoaderOptions{batch_size, shuffle, drop_last, seed}).
struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  /// Drop the last, short batch (per shard for an iterable dataset).
  bool drop_last = false;
  /// Shuffle order: randperm with a generator seeded seed + epoch.
  uint64_t seed = 0;
  /// Worker threads loading and collating batches; 0 loads on the thread that calls next().
  int64_t num_workers = 0;
  /// Batches each worker loads ahead; unset means 2. Only with num_workers > 0 (as PyTorch).
  std::optional<int64_t> prefetch_factor;
  /// Put batches in page-locked memory for asynchronous copies to a GPU; without CUDA it does
  /// nothing (logged once per loader).
  bool pin_memory = false;
  /// Keep the worker threads between epochs (and between streams) instead of starting them for
  /// each stream. Only with num_workers > 0 (as PyTorch).
  bool persistent_workers = false;
  /// Seconds next() waits for a worker's batch before a DataError; 0 waits forever. Applies to
  /// workers only (num_workers > 0), as in PyTorch.
  double timeout = 0;
  /// Replaces the default collate (volt::collate) when set; called on the worker threads.
  std::function<Batch(std::vector<Batch>)> collate_fn;

  template <class V>
  void visit(V& v) {
    v("batch_size", batch_size)("shuffle", shuffle)("drop_last", drop_last)("seed", seed)("num_workers", num_workers)(
        "prefetch_factor", prefetch_factor)("pin_memory", pin_memory)("persistent_workers", persistent_workers)(
        "timeout", timeout);
  }
  /// ConfigError naming the key (`prefix`.key) for a value out of range or a combination PyTorch
  /// rejects (prefetch_factor or persistent_workers without workers).
  void validate(const std::string& prefix = "data") const;
  int64_t effective_prefetch_factor() const { return prefetch_factor.value_or(2); }
};

/// Owns shared references to its dataset and, with persistent_workers, its worker threads (joined
/// when the loader and its last stream are gone). Thread-safety: the const calls (num_batches,
/// indices, batch, iterate) may run concurrently with each other; set_epoch and set_distributed
/// need exclusive access. Movable; a copy shares the dataset and starts its own workers.
class DataLoader {
 public:
  /// Lightning's "inf": num_batches() of an iterable dataset without a size.
  static constexpr int64_t kUnknownLength = std::numeric_limits<int64_t>::max();

  /// ConfigError when the dataset is null or the options are invalid.
  DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options);
  DataLoader(std::shared_ptr<IterableDataset> dataset, DataLoaderOptions options);
  DataLoader(std::nullptr_t, DataLoaderOptions options);
  DataLoader(const DataLoader& other);
  DataLoader(DataLoader&& other) noexcept;
  DataLoader& operator=(const DataLoader& other);
  DataLoader& operator=(DataLoader&& other) noexcept;
  ~DataLoader();

  /// Restricts this loader to `rank`'s share of every epoch (called by distributed strategies).
  /// `pad` (DistributedSampler): the ranks' shares are made equal by repeating the head of the
  /// order, so every rank runs the same number of batches. false: every sample exactly once, the
  /// first ranks one sample more when the size does not divide (for evaluation and prediction).
  /// An iterable dataset is split by ShardInfo instead (its streams ignore `pad`).
  void set_distributed(int64_t rank, int64_t world_size, bool pad = true);
  bool padded() const { return pad_; }
  /// Sets the epoch; with shuffle the order is randperm(seed + epoch) as in PyTorch.
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }

  bool is_iterable() const { return iterable_ != nullptr; }
  /// This rank's batches per epoch; kUnknownLength for an iterable dataset without a size.
  int64_t num_batches() const;
  /// The sample indices this rank visits this epoch, in order (map-style; ConfigError otherwise).
  /// Computed once per set_epoch / set_distributed; valid until the next of those calls.
  const std::vector<int64_t>& indices() const;
  /// The `i`-th batch of the current epoch for this rank, loaded on the calling thread (map-style).
  Batch batch(int64_t i) const;
  /// This rank's batches of the current epoch from batch `start` on (exact mid-epoch resume: a
  /// map-style dataset starts loading at `start`, an iterable one loads and drops the first `start`
  /// batches). The stream keeps what it needs (dataset, order, options): it may outlive the loader
  /// and does not see later set_epoch calls. With persistent_workers a new stream takes the workers
  /// over from the previous one, whose next() then fails.
  BatchStream iterate(int64_t start = 0) const;

  const DataLoaderOptions& options() const { return options_; }
  /// The map-style dataset (ConfigError for an iterable one).
  const Dataset& dataset() const;
  /// The iterable dataset (ConfigError for a map-style one).
  const IterableDataset& iterable_dataset() const;
  /// Samples in the dataset (all ranks), or nullopt for an iterable dataset without a size.
  std::optional<int64_t> dataset_size() const;
  int64_t rank() const { return rank_; }
  int64_t world_size() const { return world_size_; }

 private:
  void init();
  void refresh_indices();
  std::shared_ptr<detail::WorkerPool> persistent_pool() const;

  std::shared_ptr<Dataset> dataset_;
  std::shared_ptr<IterableDataset> iterable_;
  DataLoaderOptions options_;
  int64_t rank_ = 0;
  int64_t world_size_ = 1;
  bool pad_ = true;
  int64_t epoch_ = 0;
  bool pin_ = false;  // pin_memory and CUDA available
  std::shared_ptr<const std::vector<int64_t>> indices_;
  std::unique_ptr<detail::PersistentWorkers> workers_;
};

}  // namespace volt
