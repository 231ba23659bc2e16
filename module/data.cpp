#include "volt/module/data.h"

#include <torch/torch.h>

#include "volt/core/errors.h"

namespace volt {

DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  VOLT_CHECK(dataset_ != nullptr, ConfigError, "DataLoader: dataset is null");
  VOLT_CHECK(options_.batch_size >= 1, ConfigError, "DataLoader: batch_size must be >= 1, got ", options_.batch_size);
}

void DataLoader::set_distributed(int64_t rank, int64_t world_size) {
  VOLT_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, ConfigError, "DataLoader: bad rank ", rank,
             " for world size ", world_size);
  rank_ = rank;
  world_size_ = world_size;
  cached_epoch_ = -1;
}

std::vector<int64_t> DataLoader::indices() const {
  if (cached_epoch_ == epoch_) return cached_indices_;
  const int64_t n = dataset_->size();
  std::vector<int64_t> order(n);
  if (options_.shuffle) {
    auto gen = at::detail::createCPUGenerator(options_.seed + static_cast<uint64_t>(epoch_));
    auto perm = torch::randperm(n, gen, torch::kLong);
    auto acc = perm.accessor<int64_t, 1>();
    for (int64_t i = 0; i < n; ++i) order[i] = acc[i];
  } else {
    for (int64_t i = 0; i < n; ++i) order[i] = i;
  }
  std::vector<int64_t> mine;
  if (world_size_ == 1) {
    mine = std::move(order);
  } else {
    // PyTorch DistributedSampler (drop_last=False): pad by repeating the head, then stride by rank.
    const int64_t per_rank = (n + world_size_ - 1) / world_size_;
    const int64_t total = per_rank * world_size_;
    for (int64_t i = n, k = 0; i < total && n > 0; ++i, ++k) order.push_back(order[k % n]);
    for (int64_t i = rank_; i < total; i += world_size_) mine.push_back(order[i]);
  }
  cached_indices_ = mine;
  cached_epoch_ = epoch_;
  return mine;
}

int64_t DataLoader::num_batches() const {
  const int64_t n = static_cast<int64_t>(indices().size());
  return options_.drop_last ? n / options_.batch_size : (n + options_.batch_size - 1) / options_.batch_size;
}

Batch DataLoader::batch(int64_t i) const {
  const auto idx = indices();
  VOLT_CHECK(i >= 0 && i < num_batches(), ConfigError, "DataLoader: batch ", i, " out of range [0, ", num_batches(),
             ")");
  const int64_t begin = i * options_.batch_size;
  const int64_t end = std::min<int64_t>(begin + options_.batch_size, static_cast<int64_t>(idx.size()));
  std::vector<Batch> samples;
  samples.reserve(end - begin);
  for (int64_t k = begin; k < end; ++k) samples.push_back(dataset_->get(idx[k]));
  return collate(samples);
}

Batch collate(const std::vector<Batch>& samples) {
  VOLT_CHECK(!samples.empty(), ConfigError, "collate: no samples");
  const size_t width = samples[0].size();
  Batch out;
  for (size_t j = 0; j < width; ++j) {
    std::vector<torch::Tensor> col;
    col.reserve(samples.size());
    for (const auto& s : samples) {
      VOLT_CHECK(s.size() == width, DataError, "collate: samples have different numbers of tensors");
      col.push_back(s[j]);
    }
    out.push_back(torch::stack(col));
  }
  return out;
}

}  // namespace volt
