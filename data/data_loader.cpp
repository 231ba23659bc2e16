#include "volt/data/data_loader.h"

#include <spdlog/spdlog.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <cmath>
#include <mutex>

#include "volt/core/errors.h"
#include "volt/data/worker_pool.h"

namespace volt {

namespace detail {

uint64_t YamlCodec<uint64_t>::decode(const YAML::Node& n, const std::string& key) {
  const int64_t v = YamlCodec<int64_t>::decode(n, key);
  VOLT_CHECK(v >= 0, ConfigError, "config key '", key, "': expected a non-negative integer, got ", v);
  return static_cast<uint64_t>(v);
}

/// A loader's persistent workers, started by its first stream.
struct PersistentWorkers {
  std::mutex mutex;
  std::shared_ptr<WorkerPool> pool;
};

}  // namespace detail

void DataLoaderOptions::validate(const std::string& prefix) const {
  auto key = [&](const char* k) { return prefix.empty() ? std::string(k) : prefix + "." + k; };
  VOLT_CHECK(batch_size >= 1, ConfigError, "config key '", key("batch_size"), "': must be >= 1, got ", batch_size);
  VOLT_CHECK(num_workers >= 0, ConfigError, "config key '", key("num_workers"),
             "': must be >= 0 (0 loads on the calling thread), got ", num_workers);
  if (prefetch_factor) {
    VOLT_CHECK(num_workers > 0, ConfigError, "config key '", key("prefetch_factor"),
               "': only applies with worker threads, but num_workers is 0; leave it unset or set num_workers > 0");
    VOLT_CHECK(*prefetch_factor >= 1, ConfigError, "config key '", key("prefetch_factor"), "': must be >= 1, got ",
               *prefetch_factor);
  }
  VOLT_CHECK(!persistent_workers || num_workers > 0, ConfigError, "config key '", key("persistent_workers"),
             "': needs worker threads, but num_workers is 0; set num_workers > 0 or persistent_workers: false");
  VOLT_CHECK(std::isfinite(timeout) && timeout >= 0, ConfigError, "config key '", key("timeout"),
             "': must be >= 0 seconds (0 waits forever), got ", timeout);
}

DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  VOLT_CHECK(dataset_ != nullptr, ConfigError, "DataLoader: dataset is null");
  init();
}

DataLoader::DataLoader(std::shared_ptr<IterableDataset> dataset, DataLoaderOptions options)
    : iterable_(std::move(dataset)), options_(std::move(options)) {
  VOLT_CHECK(iterable_ != nullptr, ConfigError, "DataLoader: dataset is null");
  VOLT_CHECK(!options_.shuffle, ConfigError,
             "DataLoader: shuffle=true with an IterableDataset; an iterable dataset orders its own stream "
             "(ShardInfo has the epoch and seed to shuffle by)");
  init();
}

DataLoader::DataLoader(std::nullptr_t, DataLoaderOptions) { throw ConfigError("DataLoader: dataset is null"); }

void DataLoader::init() {
  options_.validate("DataLoaderOptions");
  workers_ = std::make_unique<detail::PersistentWorkers>();
  if (options_.pin_memory) {
    pin_ = torch::cuda::is_available();
    if (!pin_) spdlog::info("DataLoader: pin_memory=true has no effect without CUDA; batches stay in pageable memory");
  }
  refresh_indices();
}

DataLoader::DataLoader(const DataLoader& o)
    : dataset_(o.dataset_),
      iterable_(o.iterable_),
      options_(o.options_),
      rank_(o.rank_),
      world_size_(o.world_size_),
      pad_(o.pad_),
      epoch_(o.epoch_),
      pin_(o.pin_),
      indices_(o.indices_),
      workers_(std::make_unique<detail::PersistentWorkers>()) {}

DataLoader& DataLoader::operator=(const DataLoader& o) {
  if (this != &o) *this = DataLoader(o);
  return *this;
}
DataLoader::DataLoader(DataLoader&& o) noexcept = default;
DataLoader& DataLoader::operator=(DataLoader&& o) noexcept = default;
DataLoader::~DataLoader() = default;

void DataLoader::set_distributed(int64_t rank, int64_t world_size, bool pad) {
  VOLT_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, ConfigError, "DataLoader: bad rank ", rank,
             " for world size ", world_size);
  rank_ = rank;
  world_size_ = world_size;
  pad_ = pad;
  refresh_indices();
}

void DataLoader::set_epoch(int64_t epoch) {
  if (epoch == epoch_ && indices_) return;
  epoch_ = epoch;
  refresh_indices();
}

void DataLoader::refresh_indices() {
  if (!dataset_) return;
  const int64_t n = dataset_->size();
  std::vector<int64_t> order(n);
  if (options_.shuffle) {
    auto gen = at::detail::createCPUGenerator(options_.seed + static_cast<uint64_t>(epoch_));
    auto perm = torch::randperm(n, gen, torch::kLong);
    const int64_t* p = perm.data_ptr<int64_t>();
    std::copy(p, p + n, order.begin());
  } else {
    for (int64_t i = 0; i < n; ++i) order[i] = i;
  }
  if (world_size_ == 1) {
    indices_ = std::make_shared<const std::vector<int64_t>>(std::move(order));
    return;
  }
  // PyTorch DistributedSampler (drop_last=False): pad by repeating the head, then stride by rank.
  const int64_t per_rank = (n + world_size_ - 1) / world_size_;
  const int64_t total = pad_ ? per_rank * world_size_ : n;
  for (int64_t i = n, k = 0; i < total && n > 0; ++i, ++k) order.push_back(order[k % n]);
  std::vector<int64_t> mine;
  mine.reserve(per_rank);
  for (int64_t i = rank_; i < total; i += world_size_) mine.push_back(order[i]);
  indices_ = std::make_shared<const std::vector<int64_t>>(std::move(mine));
}

const std::vector<int64_t>& DataLoader::indices() const {
  VOLT_CHECK(!is_iterable(), ConfigError,
             "DataLoader::indices(): an IterableDataset has no index order (its streams decide it)");
  return *indices_;
}

int64_t DataLoader::num_batches() const {
  const int64_t bs = options_.batch_size;
  auto batches = [&](int64_t samples) { return options_.drop_last ? samples / bs : (samples + bs - 1) / bs; };
  if (!is_iterable()) return batches(static_cast<int64_t>(indices_->size()));
  const std::optional<int64_t> n = iterable_->size();
  if (!n) return kUnknownLength;
  // Each shard is batched on its own (ShardInfo's split of n samples).
  const int64_t workers = std::max<int64_t>(1, options_.num_workers), shards = world_size_ * workers;
  int64_t total = 0;
  for (int64_t w = 0; w < workers; ++w) total += batches(ShardInfo::shard_size(*n, rank_ * workers + w, shards));
  return total;
}

Batch DataLoader::batch(int64_t i) const {
  VOLT_CHECK(!is_iterable(), ConfigError,
             "DataLoader::batch(i) needs a map-style Dataset; read an IterableDataset with iterate()");
  const int64_t n = num_batches();
  VOLT_CHECK(i >= 0 && i < n, ConfigError, "DataLoader: batch ", i, " out of range [0, ", n, ")");
  detail::StreamSpec spec;
  spec.dataset = dataset_;
  spec.indices = indices_;
  spec.num_batches = n;
  spec.batch_size = options_.batch_size;
  spec.drop_last = options_.drop_last;
  spec.pin_memory = pin_;
  spec.collate_fn = options_.collate_fn;
  return detail::load_map_batch(spec, i);
}

BatchStream DataLoader::iterate(int64_t start) const {
  const int64_t n = num_batches();
  VOLT_CHECK(start >= 0 && (is_iterable() || start <= n), ConfigError, "DataLoader::iterate: start batch ", start,
             " out of range [0, ", n, "]");
  detail::StreamSpec spec;
  spec.dataset = dataset_;
  spec.iterable = iterable_;
  spec.indices = indices_;
  spec.num_batches = is_iterable() ? 0 : n;
  spec.start = start;
  spec.batch_size = options_.batch_size;
  spec.drop_last = options_.drop_last;
  spec.num_workers = options_.num_workers;
  spec.prefetch_factor = options_.effective_prefetch_factor();
  spec.timeout = options_.timeout;
  spec.pin_memory = pin_;
  spec.collate_fn = options_.collate_fn;
  spec.shard.rank = rank_;
  spec.shard.world_size = world_size_;
  spec.shard.epoch = epoch_;
  spec.shard.seed = options_.seed;
  if (options_.persistent_workers) spec.persistent_pool = persistent_pool();
  return BatchStream(std::move(spec));
}

std::shared_ptr<detail::WorkerPool> DataLoader::persistent_pool() const {
  VOLT_CHECK(workers_ != nullptr, ConfigError, "DataLoader: iterate() on a moved-from loader");
  std::lock_guard<std::mutex> lock(workers_->mutex);
  if (!workers_->pool) workers_->pool = std::make_shared<detail::WorkerPool>(options_.num_workers);
  return workers_->pool;
}

const Dataset& DataLoader::dataset() const {
  VOLT_CHECK(dataset_ != nullptr, ConfigError,
             "DataLoader::dataset(): this loader reads an IterableDataset (use iterable_dataset() or dataset_size())");
  return *dataset_;
}

const IterableDataset& DataLoader::iterable_dataset() const {
  VOLT_CHECK(iterable_ != nullptr, ConfigError,
             "DataLoader::iterable_dataset(): this loader reads a map-style Dataset");
  return *iterable_;
}

std::optional<int64_t> DataLoader::dataset_size() const {
  return dataset_ ? std::optional<int64_t>(dataset_->size()) : iterable_->size();
}

}  // namespace volt
