// DataLoader with worker threads (map-style): the same batches whatever num_workers is, exact resume
// with iterate(start), custom collate, errors from workers, timeouts, streams destroyed early,
// persistent workers, option validation.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <thread>
#include <vector>

#include "data/data_support.h"
#include "volt/core/options.h"

using namespace volt;
using namespace volt::testing;
using Catch::Matchers::Contains;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

TEST_CASE("map-style: the same batches bitwise for 0, 1 and 3 workers", "[data]") {
  auto ds = std::make_shared<IndexedDataset>(37);
  for (bool drop_last : {false, true}) {
    for (bool distributed : {false, true}) {
      INFO("drop_last " << drop_last << " distributed " << distributed);
      std::vector<std::vector<Batch>> runs;
      for (int64_t workers : {0, 1, 3}) {
        DataLoader loader(ds, loader_options(4, workers, /*shuffle=*/true, drop_last));
        if (distributed) loader.set_distributed(1, 2);
        loader.set_epoch(3);
        auto batches = drain(loader.iterate());
        CHECK(static_cast<int64_t>(batches.size()) == loader.num_batches());
        for (int64_t i = 0; i < loader.num_batches(); ++i) CHECK(same_batch(batches[i], loader.batch(i)));
        runs.push_back(std::move(batches));
      }
      const int64_t samples = distributed ? 19 : 37;
      CHECK(static_cast<int64_t>(runs[0].size()) == (drop_last ? samples / 4 : (samples + 3) / 4));
      CHECK(same_batches(runs[0], runs[1]));
      CHECK(same_batches(runs[0], runs[2]));
      // The order is the loader's (shuffled, the rank's slice), not 0..n-1.
      DataLoader ref(ds, loader_options(4, 0, true, drop_last));
      if (distributed) ref.set_distributed(1, 2);
      ref.set_epoch(3);
      const auto& idx = ref.indices();
      const auto ids = ids_of(runs[2]);
      CHECK(std::vector<int64_t>(idx.begin(), idx.begin() + ids.size()) == ids);
    }
  }
}

TEST_CASE("iterate(start) is the tail of iterate(0)", "[data]") {
  auto ds = std::make_shared<IndexedDataset>(30);
  for (int64_t workers : {0, 2}) {
    DataLoader loader(ds, loader_options(4, workers, true));
    loader.set_epoch(1);
    const auto all = drain(loader.iterate(0));
    REQUIRE(all.size() == 8);
    for (int64_t start : {1, 3, 7, 8}) {
      INFO("workers " << workers << " start " << start);
      auto stream = loader.iterate(start);
      CHECK(stream.position() == start);
      const auto tail = drain(std::move(stream));
      CHECK(same_batches(tail, std::vector<Batch>(all.begin() + start, all.end())));
    }
    // Resuming loads only the batches from `start` on.
    ds->calls = 0;
    drain(loader.iterate(6));
    CHECK(ds->calls == 6);  // batches 6 (4 samples) and 7 (2)
    CHECK_THROWS_AS(loader.iterate(9), ConfigError);
    CHECK_THROWS_AS(loader.iterate(-1), ConfigError);
  }
  // Range-for over a stream.
  DataLoader loader(ds, loader_options(8, 2));
  int64_t n = 0;
  for (Batch& b : loader.iterate(1)) n += b.at("id").numel();
  CHECK(n == 22);
}

TEST_CASE("indices are computed once per epoch and handed out by reference", "[data]") {
  DataLoader loader(std::make_shared<IndexedDataset>(20), loader_options(3, 0, true));
  const auto* first = &loader.indices();
  loader.batch(0);
  loader.batch(1);
  CHECK(&loader.indices() == first);
  CHECK(loader.indices().data() == first->data());  // no copy per batch
  loader.set_epoch(1);
  CHECK(loader.indices() != std::vector<int64_t>(first->begin(), first->end()));
}

TEST_CASE("collate_fn replaces the default collate, on the workers too", "[data]") {
  auto ds = std::make_shared<IndexedDataset>(10);
  for (int64_t workers : {0, 2}) {
    auto o = loader_options(4, workers);
    o.collate_fn = [](std::vector<Batch> samples) {
      std::vector<torch::Tensor> ids;
      for (auto& s : samples) ids.push_back(s.at("id"));
      return Batch{}.set("ids", torch::stack(ids)).set("count", torch::tensor(int64_t(samples.size())));
    };
    DataLoader loader(ds, o);
    auto batches = drain(loader.iterate());
    REQUIRE(batches.size() == 3);
    CHECK(torch::equal(batches[1].at("ids"), torch::tensor({4, 5, 6, 7})));
    CHECK(batches[2].at("count").item<int64_t>() == 2);
    CHECK(batches[0].empty());
    CHECK(same_batch(loader.batch(2), batches[2]));
  }
}

TEST_CASE("a failing Dataset::get or collate is a DataError naming the batch and the sample", "[data]") {
  for (int64_t workers : {0, 1, 3}) {
    INFO("workers " << workers);
    DataLoader loader(std::make_shared<IndexedDataset>(40, milliseconds(0), /*throw_at=*/13),
                      loader_options(4, workers));
    auto stream = loader.iterate();
    int64_t ok = 0;
    try {
      while (stream.next()) ++ok;
      FAIL("no error");
    } catch (const DataError& e) {
      const std::string what = e.what();
      CHECK_THAT(what, Contains("batch 3") && Contains("sample index 13") && Contains("corrupt record 13"));
    }
    CHECK(ok == 3);
    CHECK_THROWS_AS(stream.next(), DataError);  // the same error again
    CHECK_THROWS_WITH(loader.batch(3), Contains("sample index 13"));
  }
  auto o = loader_options(4, 2);
  o.collate_fn = [](std::vector<Batch> s) -> Batch {
    if (s[0].at("id").item<int64_t>() == 8) throw std::runtime_error("bad collate");
    return collate(s);
  };
  DataLoader loader(std::make_shared<IndexedDataset>(20), o);
  auto stream = loader.iterate();
  stream.next();
  stream.next();
  CHECK_THROWS_WITH(stream.next(), Contains("batch 2") && Contains("collate") && Contains("bad collate"));
}

TEST_CASE("a worker slower than timeout is a DataError", "[data]") {
  auto o = loader_options(1, 2);
  o.timeout = 0.2;
  DataLoader loader(std::make_shared<IndexedDataset>(4, milliseconds(1500)), o);
  const auto t0 = Clock::now();
  {
    auto stream = loader.iterate();
    CHECK_THROWS_WITH(stream.next(), Contains("timeout=0.2") && Contains("batch 0"));
    CHECK(seconds_since(t0) < 1.2);
  }  // the destructor waits for the get in progress, then joins
  CHECK(seconds_since(t0) < 4.0);
}

TEST_CASE("destroying a stream early stops its workers promptly", "[data]") {
  auto ds = std::make_shared<IndexedDataset>(400, milliseconds(10));
  const int64_t base = thread_count();
  {
    DataLoader loader(ds, loader_options(4, 4));
    auto stream = loader.iterate();
    REQUIRE(stream.next());
    REQUIRE(stream.next());
    CHECK(thread_count() >= base + 4);
    const auto t0 = Clock::now();
    { BatchStream gone = std::move(stream); }
    CHECK(seconds_since(t0) < 0.5);  // at most a sample per worker, not the epoch (4 s of loading)
    CHECK(thread_count() == base);
    CHECK(ds->calls < 60);  // 2 batches consumed, at most prefetch_factor (2) per worker ahead
    // A moved-from stream is inert.
    CHECK_THROWS_AS(stream.next(), DataError);
  }
  // Persistent workers go back to waiting, and serve the next stream.
  auto o = loader_options(4, 3);
  o.persistent_workers = true;
  DataLoader loader(ds, o);
  {
    auto stream = loader.iterate();
    REQUIRE(stream.next());
  }
  CHECK(thread_count() == base + 3);
  auto stream = loader.iterate(97);
  CHECK(stream.next()->at("id").numel() == 4);
  CHECK(thread_count() == base + 3);
}

TEST_CASE("persistent workers give the same batches epoch after epoch", "[data]") {
  auto ds = std::make_shared<IndexedDataset>(26);
  auto o = loader_options(4, 3, true);
  o.persistent_workers = true;
  o.prefetch_factor = 1;
  DataLoader persistent(ds, o);
  DataLoader plain(ds, loader_options(4, 0, true));
  const int64_t base = thread_count();
  for (int64_t epoch : {0, 1, 2, 1}) {
    INFO("epoch " << epoch);
    persistent.set_epoch(epoch);
    plain.set_epoch(epoch);
    CHECK(same_batches(drain(persistent.iterate()), drain(plain.iterate())));
    CHECK(same_batches(drain(persistent.iterate(5)), drain(plain.iterate(5))));
  }
  CHECK(thread_count() == base + 3);  // started once, kept
  // A new stream takes the workers over; the older one then fails instead of hanging.
  auto first = persistent.iterate();
  REQUIRE(first.next());
  auto second = persistent.iterate();
  CHECK_THROWS_WITH(first.next(), Contains("newer iterate()"));
  CHECK(same_batches(drain(std::move(second)), drain(plain.iterate())));
}

TEST_CASE("pin_memory without CUDA changes nothing", "[data]") {
  auto ds = std::make_shared<IndexedDataset>(10);
  auto o = loader_options(4, 2);
  o.pin_memory = true;
  DataLoader pinned(ds, o);
  CHECK(same_batches(drain(pinned.iterate()), drain(DataLoader(ds, loader_options(4, 0)).iterate())));
}

TEST_CASE("loader options are validated naming the key", "[data]") {
  auto ds = std::make_shared<IndexedDataset>(4);
  auto rejects = [&](DataLoaderOptions o, const std::string& key) {
    CHECK_THROWS_WITH(DataLoader(ds, o), Contains("'DataLoaderOptions." + key + "'"));
    CHECK_THROWS_WITH(o.validate("data.train"), Contains("'data.train." + key + "'"));
    CHECK_THROWS_AS(o.validate(), ConfigError);
  };
  DataLoaderOptions o;
  o.prefetch_factor = 2;  // PyTorch: only with workers
  rejects(o, "prefetch_factor");
  o.num_workers = 2;
  o.prefetch_factor = 0;
  rejects(o, "prefetch_factor");
  o = DataLoaderOptions{};
  o.persistent_workers = true;
  rejects(o, "persistent_workers");
  o = DataLoaderOptions{};
  o.num_workers = -1;
  rejects(o, "num_workers");
  o = DataLoaderOptions{};
  o.timeout = -1;
  rejects(o, "timeout");
  o = DataLoaderOptions{};
  o.batch_size = 0;
  rejects(o, "batch_size");
  o = DataLoaderOptions{};
  o.num_workers = 2;
  o.prefetch_factor = 4;
  o.persistent_workers = true;
  o.timeout = 30;
  CHECK_NOTHROW(o.validate());
  CHECK(DataLoaderOptions{}.effective_prefetch_factor() == 2);

  // YAML, through visit().
  auto y = YAML::Load("{batch_size: 16, seed: 7, num_workers: 4, prefetch_factor: 3, persistent_workers: true}");
  auto read = options_from_yaml<DataLoaderOptions>(y, "data");
  CHECK(read.batch_size == 16);
  CHECK(read.seed == 7u);
  CHECK(read.prefetch_factor == std::optional<int64_t>(3));
  CHECK(options_to_yaml(read)["num_workers"].as<int64_t>() == 4);
  CHECK_THROWS_WITH(options_from_yaml<DataLoaderOptions>(YAML::Load("{workers: 4}"), "data"), Contains("workers"));
  CHECK_THROWS_WITH(options_from_yaml<DataLoaderOptions>(YAML::Load("{seed: -1}"), "data"), Contains("data.seed"));
}
