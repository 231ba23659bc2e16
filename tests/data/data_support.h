#pragma once
// Shared fixtures of the data tests (tests/data/test_*.cpp): datasets whose samples say which index
// they are, with positional, named and nested fields; streams split by ShardInfo; batch comparison.
#include <dirent.h>
#include <torch/torch.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "volt/core/errors.h"
#include "volt/module/data.h"

namespace volt::testing {

/// Sample i: {randn(4) seeded by i, i as long}, "id": i, "inputs": {"mask": i % 2 as bool [2]}.
/// Optional delay per get (standing for decoding) and an index whose get throws.
class IndexedDataset : public Dataset {
 public:
  explicit IndexedDataset(int64_t n, std::chrono::milliseconds delay = std::chrono::milliseconds(0),
                          int64_t throw_at = -1)
      : n_(n), delay_(delay), throw_at_(throw_at) {}
  int64_t size() const override { return n_; }
  Batch get(int64_t i) const override {
    ++calls;
    if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
    VOLT_CHECK(i != throw_at_, DataError, "corrupt record ", i);
    auto gen = at::detail::createCPUGenerator(1000 + static_cast<uint64_t>(i));
    Batch b{torch::randn({4}, gen), torch::tensor(i, torch::kLong)};
    b.set("id", torch::tensor(i, torch::kLong));
    b.set("inputs", Batch{}.set("mask", torch::full({2}, i % 2 == 1, torch::kBool)));
    return b;
  }
  mutable std::atomic<int64_t> calls{0};

 private:
  int64_t n_;
  std::chrono::milliseconds delay_;
  int64_t throw_at_;
};

/// Samples 0..n-1 as a stream ({i} and "id": i), each shard taking every num_shards()-th sample.
/// Records the shards asked for.
class IndexedStream : public IterableDataset {
 public:
  explicit IndexedStream(int64_t n, bool known_size = true, std::chrono::milliseconds delay = {})
      : n_(n), known_(known_size), delay_(delay) {}
  std::unique_ptr<SampleStream> stream(const ShardInfo& shard) const override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      shards.insert({shard.shard(), shard.num_shards()});
    }
    return SampleStream::from([this, shard, k = int64_t(0)]() mutable -> std::optional<Batch> {
      while (k < n_ && !shard.owns(k)) ++k;
      if (k >= n_) return std::nullopt;
      if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
      Batch b{torch::tensor(k, torch::kLong)};
      b.set("id", torch::tensor(k, torch::kLong));
      ++k;
      return b;
    });
  }
  std::optional<int64_t> size() const override { return known_ ? std::optional<int64_t>(n_) : std::nullopt; }
  mutable std::set<std::pair<int64_t, int64_t>> shards;  // (shard, num_shards)

 private:
  mutable std::mutex mutex_;
  int64_t n_;
  bool known_;
  std::chrono::milliseconds delay_;
};

/// Both undefined, or the same dtype, shape and bits.
inline bool same_tensor(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.defined() != b.defined()) return false;
  return !a.defined() || (a.scalar_type() == b.scalar_type() && torch::equal(a, b));
}

/// Same structure and bitwise-equal tensors.
inline bool same_batch(const Batch& a, const Batch& b) {
  if (a.size() != b.size() || a.names() != b.names()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!same_tensor(a[i], b[i])) return false;
  for (const auto& n : a.names()) {
    if (a.is_child(n) != b.is_child(n)) return false;
    if (a.is_child(n) ? !same_batch(a.child(n), b.child(n)) : !same_tensor(a.at(n), b.at(n))) return false;
  }
  return true;
}

inline std::vector<Batch> drain(BatchStream stream) {
  std::vector<Batch> out;
  while (auto b = stream.next()) out.push_back(std::move(*b));
  return out;
}

inline bool same_batches(const std::vector<Batch>& a, const std::vector<Batch>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!same_batch(a[i], b[i])) return false;
  return true;
}

/// The "id" field of every batch, in order.
inline std::vector<int64_t> ids_of(const std::vector<Batch>& batches) {
  std::vector<int64_t> out;
  for (const auto& b : batches) {
    auto t = b.at("id").contiguous();
    out.insert(out.end(), t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
  }
  return out;
}

/// Threads of this process (entries of /proc/self/task).
inline int64_t thread_count() {
  int64_t n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') ++n;
    closedir(d);
  }
  return n;
}

inline DataLoaderOptions loader_options(int64_t batch_size, int64_t workers, bool shuffle = false,
                                        bool drop_last = false) {
  DataLoaderOptions o;
  o.batch_size = batch_size;
  o.shuffle = shuffle;
  o.drop_last = drop_last;
  o.seed = 5;
  o.num_workers = workers;
  return o;
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace volt::testing
