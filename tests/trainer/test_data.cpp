#include <torch/torch.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <numeric>
#include <vector>

#include "volt/core/errors.h"
#include "volt/module/data.h"

using namespace volt;

namespace {

/// Sample i is {full({3}, i) as float, i as long}: a batch tells which samples it holds.
class IndexDataset : public Dataset {
 public:
  explicit IndexDataset(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  Batch get(int64_t i) const override {
    return {torch::full({3}, static_cast<double>(i), torch::kFloat), torch::tensor(i, torch::kLong)};
  }

 private:
  int64_t n_;
};

DataLoader make_loader(int64_t n, int64_t batch_size, bool shuffle = false, bool drop_last = false, uint64_t seed = 0) {
  DataLoaderOptions o;
  o.batch_size = batch_size;
  o.shuffle = shuffle;
  o.drop_last = drop_last;
  o.seed = seed;
  return DataLoader(std::make_shared<IndexDataset>(n), o);
}

/// The sample indices the loader yields this epoch, read from the batches themselves.
std::vector<int64_t> visited(const DataLoader& loader) {
  std::vector<int64_t> out;
  for (int64_t b = 0; b < loader.num_batches(); ++b) {
    auto batch = loader.batch(b);
    auto ids = batch[1];
    for (int64_t k = 0; k < ids.size(0); ++k) {
      out.push_back(ids[k].item<int64_t>());
      // Both tensors of a sample stay together.
      REQUIRE(batch[0][k][0].item<float>() == static_cast<float>(out.back()));
    }
  }
  return out;
}

/// torch.randperm(n, generator=torch.Generator().manual_seed(seed)), as a vector.
std::vector<int64_t> randperm(int64_t n, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  auto p = torch::randperm(n, gen, torch::kLong);
  return std::vector<int64_t>(p.data_ptr<int64_t>(), p.data_ptr<int64_t>() + n);
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

}  // namespace

TEST_CASE("DataLoader batch shapes and drop_last", "[data]") {
  auto loader = make_loader(10, 4);
  REQUIRE(loader.num_batches() == 3);
  auto b0 = loader.batch(0);
  REQUIRE(b0.size() == 2);
  CHECK(b0[0].sizes() == torch::IntArrayRef({4, 3}));
  CHECK(b0[1].sizes() == torch::IntArrayRef({4}));
  CHECK(b0[1].scalar_type() == torch::kLong);
  auto b2 = loader.batch(2);
  CHECK(b2[0].sizes() == torch::IntArrayRef({2, 3}));  // the short last batch
  CHECK(visited(loader) == iota(10));                  // in order without shuffle
  CHECK_THROWS_AS(loader.batch(3), ConfigError);
  CHECK_THROWS_AS(loader.batch(-1), ConfigError);

  auto dropping = make_loader(10, 4, false, /*drop_last=*/true);
  CHECK(dropping.num_batches() == 2);
  CHECK(visited(dropping) == iota(8));
  CHECK_THROWS_AS(dropping.batch(2), ConfigError);

  // Divisible sizes: drop_last changes nothing.
  CHECK(make_loader(12, 4, false, true).num_batches() == 3);
  CHECK(make_loader(12, 4).num_batches() == 3);
  CHECK(make_loader(3, 8).num_batches() == 1);
  CHECK(make_loader(3, 8, false, true).num_batches() == 0);

  DataLoaderOptions bad;
  bad.batch_size = 0;
  CHECK_THROWS_AS(DataLoader(std::make_shared<IndexDataset>(4), bad), ConfigError);
  CHECK_THROWS_AS(DataLoader(nullptr, DataLoaderOptions{}), ConfigError);
}

TEST_CASE("collate stacks samples and rejects ragged ones", "[data]") {
  std::vector<Batch> samples = {{torch::ones({2}), torch::tensor(1)}, {torch::zeros({2}), torch::tensor(2)}};
  auto b = collate(samples);
  REQUIRE(b.size() == 2);
  CHECK(torch::equal(b[0], torch::stack({torch::ones({2}), torch::zeros({2})})));
  CHECK(torch::equal(b[1], torch::tensor({1, 2})));
  std::vector<Batch> ragged = {{torch::ones({2}), torch::tensor(1)}, {torch::zeros({2})}};
  CHECK_THROWS_AS(collate(ragged), DataError);
  CHECK_THROWS_AS(collate({}), ConfigError);
}

TEST_CASE("shuffle is randperm with a generator seeded seed + epoch", "[data]") {
  const int64_t n = 37;
  auto loader = make_loader(n, 5, /*shuffle=*/true, false, /*seed=*/7);
  for (int64_t epoch : {0, 1, 3}) {
    loader.set_epoch(epoch);
    CHECK(loader.epoch() == epoch);
    const auto expected = randperm(n, 7 + epoch);
    CHECK(loader.indices() == expected);
    CHECK(visited(loader) == expected);
    auto sorted = visited(loader);
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == iota(n));  // a permutation
  }
  // Same seed and epoch: same order; another epoch or seed: another order.
  auto a = make_loader(n, 5, true, false, 7);
  auto b = make_loader(n, 5, true, false, 7);
  a.set_epoch(2);
  b.set_epoch(2);
  CHECK(visited(a) == visited(b));
  b.set_epoch(3);
  CHECK(visited(a) != visited(b));
  auto c = make_loader(n, 5, true, false, 8);
  c.set_epoch(2);
  CHECK(visited(a) != visited(c));
  // Going back to an epoch gives its order again (no stale cache).
  b.set_epoch(2);
  CHECK(visited(a) == visited(b));
}

TEST_CASE("distributed: ranks split every epoch as PyTorch's DistributedSampler", "[data]") {
  for (int64_t world : {2, 3}) {
    for (int64_t n : {12, 13, 14}) {
      for (bool shuffle : {false, true}) {
        for (int64_t epoch : {0, 5}) {
          INFO("world " << world << " n " << n << " shuffle " << shuffle << " epoch " << epoch);
          const int64_t per_rank = (n + world - 1) / world;
          const int64_t pad = per_rank * world - n;
          // DistributedSampler: permute (or not), pad with the head of the list, take rank::world.
          std::vector<int64_t> order = shuffle ? randperm(n, 11 + epoch) : iota(n);
          for (int64_t k = 0; k < pad; ++k) order.push_back(order[k % n]);

          std::map<int64_t, int> seen;
          int64_t batches = -1;
          for (int64_t rank = 0; rank < world; ++rank) {
            auto loader = make_loader(n, 2, shuffle, false, 11);
            loader.set_distributed(rank, world);
            loader.set_epoch(epoch);
            CHECK(loader.rank() == rank);
            CHECK(loader.world_size() == world);
            auto mine = visited(loader);
            CHECK(static_cast<int64_t>(mine.size()) == per_rank);
            std::vector<int64_t> expected;
            for (int64_t i = rank; i < per_rank * world; i += world) expected.push_back(order[i]);
            CHECK(mine == expected);
            // Every rank runs the same number of batches (collectives stay in step).
            if (batches < 0) batches = loader.num_batches();
            CHECK(loader.num_batches() == batches);
            for (auto i : mine) ++seen[i];
          }
          // Every sample is seen once; the `pad` padding samples (the head of the order) twice.
          REQUIRE(static_cast<int64_t>(seen.size()) == n);
          int64_t twice = 0;
          for (auto& [i, count] : seen) {
            CHECK((count == 1 || count == 2));
            if (count == 2) {
              ++twice;
              CHECK(std::find(order.begin(), order.begin() + pad, i) != order.begin() + pad);
            }
          }
          CHECK(twice == pad);
        }
      }
    }
  }
}

TEST_CASE("distributed: same order for the same seed, another for another epoch", "[data]") {
  auto order = [](uint64_t seed, int64_t epoch, int64_t rank) {
    auto l = make_loader(20, 3, true, false, seed);
    l.set_distributed(rank, 2);
    l.set_epoch(epoch);
    return visited(l);
  };
  CHECK(order(3, 1, 0) == order(3, 1, 0));
  CHECK(order(3, 1, 1) == order(3, 1, 1));
  CHECK(order(3, 1, 0) != order(3, 2, 0));
  CHECK(order(3, 1, 0) != order(4, 1, 0));
  CHECK(order(3, 1, 0) != order(3, 1, 1));

  // set_distributed after indices were computed takes effect.
  auto l = make_loader(20, 3, true, false, 3);
  l.set_epoch(1);
  CHECK(l.indices().size() == 20);
  l.set_distributed(1, 2);
  CHECK(visited(l) == order(3, 1, 1));

  CHECK_THROWS_AS(l.set_distributed(2, 2), ConfigError);
  CHECK_THROWS_AS(l.set_distributed(-1, 2), ConfigError);
  CHECK_THROWS_AS(l.set_distributed(0, 0), ConfigError);
}
