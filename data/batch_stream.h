#pragma once
/// BatchStream: one pass over a rank's batches of an epoch, from DataLoader::iterate(start).
///
///   auto stream = loader.iterate(start);
///   while (auto batch = stream.next()) step(*batch);   // or: for (Batch& b : stream) ...
///
/// With workers (DataLoaderOptions::num_workers > 0) the batches are loaded ahead on worker threads,
/// prefetch_factor per worker; otherwise next() loads on the calling thread. Destroying a stream
/// before its end stops its workers promptly: they finish the sample they are reading (a blocking
/// Dataset::get or SampleStream::next is waited for), and are joined — or, with persistent_workers,
/// go back to waiting for the loader's next stream.
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <vector>

#include "volt/data/batch.h"
#include "volt/data/dataset.h"

namespace volt {

class DataLoader;

namespace detail {
class WorkerPool;
class StreamState;

/// Everything a stream needs, taken from its loader when it is created.
struct StreamSpec {
  std::shared_ptr<const Dataset> dataset;  // map-style, or
  std::shared_ptr<const IterableDataset> iterable;
  std::shared_ptr<const std::vector<int64_t>> indices;  // map-style: this rank's order
  int64_t num_batches = 0;                              // map-style
  int64_t start = 0;
  int64_t batch_size = 1;
  bool drop_last = false;
  int64_t num_workers = 0;
  int64_t prefetch_factor = 2;
  double timeout = 0;
  bool pin_memory = false;
  std::function<Batch(std::vector<Batch>)> collate_fn;  // empty: volt::collate
  ShardInfo shard;                                      // rank, world_size, epoch, seed
  std::shared_ptr<WorkerPool> persistent_pool;          // null: the stream starts its own workers
};

/// Loads map-style batch `i` on the calling thread; failures are DataErrors naming the batch and
/// the dataset index of the sample.
Batch load_map_batch(const StreamSpec& spec, int64_t i);
}  // namespace detail

/// Move-only. Not thread-safe: one consumer thread at a time. Owns its workers (or its claim on
/// the loader's persistent workers) and releases them in its destructor or at the end of the epoch.
class BatchStream {
 public:
  BatchStream(BatchStream&& other) noexcept;
  BatchStream& operator=(BatchStream&& other) noexcept;
  BatchStream(const BatchStream&) = delete;
  BatchStream& operator=(const BatchStream&) = delete;
  ~BatchStream();

  /// The next batch, or nullopt at the end of the epoch. DataError when loading it failed (naming
  /// the batch, the sample and the original message), when a worker produced nothing for `timeout`
  /// seconds, or when a newer iterate() took the persistent workers over; after an error every
  /// call throws it again.
  std::optional<Batch> next();
  /// The index within the epoch of the batch next() returns next.
  int64_t position() const;

  /// Input iteration over the remaining batches (each dereferenced batch is the stream's current one).
  class iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = Batch*;
    using reference = Batch&;
    iterator() = default;
    Batch& operator*() { return *current_; }
    Batch* operator->() { return &*current_; }
    iterator& operator++();
    bool operator==(const iterator& o) const { return stream_ == o.stream_; }
    bool operator!=(const iterator& o) const { return stream_ != o.stream_; }

   private:
    friend class BatchStream;
    explicit iterator(BatchStream* s);
    BatchStream* stream_ = nullptr;  // null at the end
    std::optional<Batch> current_;
  };
  iterator begin() { return iterator(this); }
  iterator end() { return iterator(); }

 private:
  friend class DataLoader;
  explicit BatchStream(detail::StreamSpec spec);
  std::unique_ptr<detail::StreamState> state_;
};

}  // namespace volt
