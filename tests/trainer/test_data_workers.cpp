// The Trainer with the loader's worker threads and with iterable datasets: training is the same
// whatever num_workers is, a mid-epoch resume with workers is bitwise, and a stream of unknown
// length trains epoch by epoch (the epoch ends where the stream does).
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "boring_model.h"
#include "distributed/multi_rank.h"
#include "trainer/trainer_support.h"
#include "volt/core/errors.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;
using Catch::Matchers::Contains;

namespace {

DataLoader worker_loader(int64_t workers, bool persistent = false) {
  DataLoaderOptions o;
  o.batch_size = 8;
  o.shuffle = true;
  o.seed = 11;
  o.num_workers = workers;
  o.persistent_workers = persistent;
  return DataLoader(std::make_shared<RandomDataset>(64), o);
}

/// RandomDataset's samples as a stream of `n`, split by ShardInfo; no length.
class RandomStream : public IterableDataset {
 public:
  explicit RandomStream(int64_t n, bool known_size = false) : data_(n), n_(n), known_(known_size) {}
  std::unique_ptr<SampleStream> stream(const ShardInfo& shard) const override {
    auto [first, last] = shard.range(n_);
    return SampleStream::from([this, k = first, last = last]() mutable -> std::optional<Batch> {
      if (k >= last) return std::nullopt;
      return data_.get(k++);
    });
  }
  std::optional<int64_t> size() const override { return known_ ? std::optional<int64_t>(n_) : std::nullopt; }

 private:
  RandomDataset data_;
  int64_t n_;
  bool known_;
};

}  // namespace

TEST_CASE("training is bitwise the same with 0, 1 or 3 loader workers", "[trainer][data]") {
  std::vector<torch::Tensor> reference;
  for (int64_t w : {0, 1, 3}) {
    INFO("num_workers " << w);
    auto o = quiet_options(temp_dir("workers"));
    o.max_epochs = 2;
    auto m = make_model(5);
    auto loader = worker_loader(w, /*persistent=*/w == 3);
    Trainer(o).fit(*m, loader);
    if (reference.empty())
      reference = snapshot(*m);
    else
      CHECK(all_equal(reference, snapshot(*m)));
  }
}

TEST_CASE("a mid-epoch resume with loader workers is bitwise equal to an uninterrupted run", "[trainer][data]") {
  const std::string root = temp_dir("workers-resume");
  auto o = quiet_options(root);
  o.max_epochs = 2;
  auto full = make_model(5);
  {
    auto loader = worker_loader(2);
    Trainer(o).fit(*full, loader);
  }
  o.enable_checkpointing = true;  // the runs below save with a ModelCheckpoint
  auto part = o;
  part.max_steps = 11;  // epoch 1, batch 3 of 8
  auto m = make_model(5);
  {
    auto loader = worker_loader(2);
    Trainer(part, {every_step_checkpoint()}).fit(*m, loader);
  }
  auto m2 = make_model(6);  // other initial weights: everything must come from the checkpoint
  auto loader = worker_loader(3);
  Trainer(o, {every_step_checkpoint()}).fit(*m2, loader, nullptr, "last");
  CHECK(all_equal(snapshot(*full), snapshot(*m2)));
}

TEST_CASE("an iterable dataset of unknown length trains epoch by epoch, as its map-style twin", "[trainer][data]") {
  auto o = quiet_options(temp_dir("iterable"));
  o.max_epochs = 2;
  auto m = make_model(5);
  DataLoader stream(std::make_shared<RandomStream>(60), DataLoaderOptions{.batch_size = 8});
  REQUIRE(stream.num_batches() == DataLoader::kUnknownLength);
  Trainer t(o);
  t.fit(*m, stream);
  CHECK(t.global_step() == 16);   // 8 batches (the last of 4 samples) per epoch
  CHECK(t.current_epoch() == 2);  // as Lightning: past the last epoch
  auto m2 = make_model(5);
  DataLoader map(std::make_shared<RandomDataset>(60), DataLoaderOptions{.batch_size = 8});
  Trainer(o).fit(*m2, map);
  CHECK(all_equal(snapshot(*m), snapshot(*m2)));
}

TEST_CASE("an iterable dataset resumes mid-epoch and at an epoch's end bitwise", "[trainer][data]") {
  const std::string root = temp_dir("iterable-resume");
  auto o = quiet_options(root);
  o.max_epochs = 3;
  auto make_stream = [] { return DataLoader(std::make_shared<RandomStream>(60), DataLoaderOptions{.batch_size = 8}); };
  auto full = make_model(5);
  {
    auto l = make_stream();
    Trainer(o).fit(*full, l);
  }
  o.enable_checkpointing = true;   // the runs below save with a ModelCheckpoint
  for (int64_t stop : {11, 16}) {  // mid-epoch 1; the end of epoch 1 (its length learnt from the stream)
    INFO("stopped at step " << stop);
    const std::string r = temp_dir("iterable-resume-run");
    auto part = o;
    part.default_root_dir = r;
    part.max_steps = stop;
    auto m = make_model(5);
    {
      auto l = make_stream();
      Trainer(part, {every_step_checkpoint()}).fit(*m, l);
    }
    auto rest = o;
    rest.default_root_dir = r;
    auto m2 = make_model(6);
    auto l = make_stream();
    Trainer t(rest, {every_step_checkpoint()});
    t.fit(*m2, l, nullptr, "last");
    CHECK(t.global_step() == 24);
    CHECK(all_equal(snapshot(*full), snapshot(*m2)));
  }
}

TEST_CASE("a fraction limit or val_check_interval of an unknown length is a ConfigError naming the key",
          "[trainer][data]") {
  auto o = quiet_options(temp_dir("iterable-limit"));
  o.limit_train_batches = BatchLimit::fraction(0.5);
  auto m = make_model(5);
  DataLoader stream(std::make_shared<RandomStream>(60), DataLoaderOptions{.batch_size = 8});
  CHECK_THROWS_WITH(Trainer(o).fit(*m, stream), Contains("trainer.limit_train_batches"));
  auto o2 = quiet_options(temp_dir("iterable-vci"));
  o2.val_check_interval = BatchLimit::fraction(0.5);
  DataLoader val(std::make_shared<RandomDataset>(16), DataLoaderOptions{.batch_size = 8});
  CHECK_THROWS_WITH(Trainer(o2).fit(*m, stream, &val), Contains("trainer.val_check_interval"));
  auto o3 = quiet_options(temp_dir("iterable-count"));
  o3.limit_train_batches = BatchLimit::count(3);
  Trainer t3(o3);
  t3.fit(*m, stream);
  CHECK(t3.global_step() == 3);
}

TEST_CASE("iterable shards of different lengths on 2 ranks: the epoch ends on both when the first runs out",
          "[trainer][data][multirank]") {
  for (std::string strategy : {"ddp", "fsdp"}) {
    DYNAMIC_SECTION(strategy) {
      const std::string dir = temp_dir("iterable-multirank");
      auto kv = quiet_worker_kv(dir);  // max_epochs 2
      kv["batch_size"] = "4";
      kv["samples"] = "33";  // shards of 17 and 16 samples: 5 and 4 batches
      kv["iterable"] = "true";
      kv["trainer.devices"] = "2";
      kv["trainer.strategy"] = strategy;
      REQUIRE(run_worker(args_for(dir + "/o.pt", kv), dir, 240) == 0);
      CHECK(read_worker_output(dir + "/o.pt").global_step == 8);  // 4 agreed batches per epoch
      CHECK(no_worker_left(dir));
    }
  }
}
