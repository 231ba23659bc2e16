// DataLoader over an IterableDataset: shards by rank and worker, every sample once, PyTorch's round
// robin over the workers, resume by skipping, lengths, errors and early destruction.
#include <torch/torch.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <numeric>
#include <vector>

#include "data/data_support.h"

using namespace volt;
using namespace volt::testing;
using Catch::Matchers::Contains;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

namespace {
std::vector<std::vector<int64_t>> id_batches(const std::vector<Batch>& batches) {
  std::vector<std::vector<int64_t>> out;
  for (const auto& b : batches) out.push_back(ids_of({b}));
  return out;
}
}  // namespace

TEST_CASE("iterable: shards by rank and worker cover every sample exactly once", "[data]") {
  const int64_t n = 53;
  for (int64_t world : {1, 2, 3}) {
    for (int64_t workers : {0, 1, 3}) {
      for (bool drop_last : {false, true}) {
        INFO("world " << world << " workers " << workers << " drop_last " << drop_last);
        std::map<int64_t, int> seen;
        int64_t dropped = 0;
        for (int64_t rank = 0; rank < world; ++rank) {
          auto ds = std::make_shared<IndexedStream>(n);
          DataLoader loader(ds, loader_options(4, workers, false, drop_last));
          loader.set_distributed(rank, world);
          REQUIRE(loader.is_iterable());
          auto batches = drain(loader.iterate());
          CHECK(static_cast<int64_t>(batches.size()) == loader.num_batches());
          for (auto i : ids_of(batches)) ++seen[i];
          // The streams asked for were this rank's shards.
          const int64_t w = std::max<int64_t>(1, workers);
          std::set<std::pair<int64_t, int64_t>> expected;
          for (int64_t k = 0; k < w; ++k) expected.insert({rank * w + k, world * w});
          CHECK(ds->shards == expected);
          for (int64_t k = 0; k < w; ++k) dropped += ShardInfo::shard_size(n, rank * w + k, world * w) % 4;
        }
        for (auto& [i, count] : seen) CHECK(count == 1);
        CHECK(static_cast<int64_t>(seen.size()) == (drop_last ? n - dropped : n));
      }
    }
  }
}

TEST_CASE("iterable: workers' batches come round robin, as PyTorch's", "[data]") {
  using V = std::vector<std::vector<int64_t>>;
  DataLoader two(std::make_shared<IndexedStream>(20), loader_options(3, 2));
  CHECK(id_batches(drain(two.iterate())) ==
        V{{0, 2, 4}, {1, 3, 5}, {6, 8, 10}, {7, 9, 11}, {12, 14, 16}, {13, 15, 17}, {18}, {19}});
  // A worker whose shard ended is skipped; drop_last drops each shard's short batch.
  DataLoader three(std::make_shared<IndexedStream>(7), loader_options(2, 3));
  CHECK(id_batches(drain(three.iterate())) == V{{0, 3}, {1, 4}, {2, 5}, {6}});
  CHECK(three.num_batches() == 4);
  DataLoader dropping(std::make_shared<IndexedStream>(7), loader_options(2, 3, false, true));
  CHECK(id_batches(drain(dropping.iterate())) == V{{0, 3}, {1, 4}, {2, 5}});
  CHECK(dropping.num_batches() == 3);
  // On the calling thread: one shard per rank, in stream order.
  DataLoader inline_(std::make_shared<IndexedStream>(7), loader_options(2, 0));
  CHECK(id_batches(drain(inline_.iterate())) == V{{0, 1}, {2, 3}, {4, 5}, {6}});
}

TEST_CASE("iterable: iterate(start) skips exactly the batches before start", "[data]") {
  for (int64_t workers : {0, 2, 3}) {
    DataLoader loader(std::make_shared<IndexedStream>(41), loader_options(4, workers));
    const auto all = drain(loader.iterate());
    for (int64_t start : {1, 4, 9}) {
      INFO("workers " << workers << " start " << start);
      CHECK(same_batches(drain(loader.iterate(start)), std::vector<Batch>(all.begin() + start, all.end())));
    }
    CHECK(drain(loader.iterate(100)).empty());  // past the end: an empty epoch
  }
}

TEST_CASE("iterable: length, and what only map-style datasets have", "[data]") {
  DataLoader unknown(std::make_shared<IndexedStream>(10, /*known_size=*/false), loader_options(4, 2));
  CHECK(unknown.num_batches() == DataLoader::kUnknownLength);
  CHECK(unknown.dataset_size() == std::nullopt);
  CHECK(drain(unknown.iterate()).size() == 4);  // 5 + 5 samples, batches of 4 per worker
  DataLoader known(std::make_shared<IndexedStream>(10), loader_options(4, 2));
  CHECK(known.num_batches() == 4);
  CHECK(known.dataset_size() == std::optional<int64_t>(10));
  CHECK_THROWS_AS(known.batch(0), ConfigError);
  CHECK_THROWS_AS(known.indices(), ConfigError);
  CHECK_THROWS_AS(known.dataset(), ConfigError);
  CHECK_NOTHROW(known.iterable_dataset());
  CHECK_THROWS_AS(DataLoader(std::make_shared<IndexedStream>(4), loader_options(2, 0, /*shuffle=*/true)), ConfigError);
  DataLoader map(std::make_shared<IndexedDataset>(4), loader_options(2, 0));
  CHECK_FALSE(map.is_iterable());
  CHECK_THROWS_AS(map.iterable_dataset(), ConfigError);
}

namespace {
/// Sample 5 of every shard fails.
class FailingStream : public IterableDataset {
 public:
  std::unique_ptr<SampleStream> stream(const ShardInfo&) const override {
    return SampleStream::from([k = 0]() mutable -> std::optional<Batch> {
      if (k == 5) throw std::runtime_error("truncated file");
      return Batch{torch::tensor(k++)};
    });
  }
};
}  // namespace

TEST_CASE("iterable: a failing stream is a DataError naming the batch and the sample", "[data]") {
  for (int64_t workers : {0, 2}) {
    INFO("workers " << workers);
    DataLoader loader(std::make_shared<FailingStream>(), loader_options(2, workers));
    auto stream = loader.iterate();
    int64_t ok = 0;
    try {
      while (stream.next()) ++ok;
      FAIL("no error");
    } catch (const DataError& e) {
      CHECK_THAT(std::string(e.what()), Contains("sample 5 of shard") && Contains("truncated file") &&
                                            Contains("batch " + std::to_string(ok)));
    }
    CHECK(ok == (workers == 0 ? 2 : 4));  // two full batches per shard come before the failure
  }
}

TEST_CASE("iterable: destroying a stream early stops its workers", "[data]") {
  const int64_t base = thread_count();
  auto ds = std::make_shared<IndexedStream>(10000, true, milliseconds(2));
  DataLoader loader(ds, loader_options(8, 3));
  auto stream = loader.iterate();
  REQUIRE(stream.next());
  const auto t0 = Clock::now();
  { BatchStream gone = std::move(stream); }
  CHECK(seconds_since(t0) < 0.5);
  CHECK(thread_count() == base);
}
