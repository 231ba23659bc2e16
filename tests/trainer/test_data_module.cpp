// LightningDataModule with the Trainer: hook order, rank-0-only prepare_data, checkpointed state,
// several validation loaders with dataloader_idx and Lightning's metric suffixes.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "boring_model.h"
#include "trainer/trainer_support.h"
#include "volt/checkpoint/checkpoint.h"
#include "volt/core/errors.h"
#include "volt/data/data_module.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;
using Catch::Matchers::Contains;

namespace {

/// Records its hooks; `val_sets` validation loaders of different data; state: a counter.
class RecordingData : public LightningDataModule {
 public:
  explicit RecordingData(int val_sets = 1) : val_sets_(val_sets) {}
  void prepare_data() override { calls.push_back("prepare_data"); }
  void setup(const std::string& stage) override { calls.push_back("setup:" + stage); }
  void teardown(const std::string& stage) override { calls.push_back("teardown:" + stage); }
  std::shared_ptr<DataLoader> train_dataloader() override {
    calls.push_back("train_dataloader");
    return std::make_shared<DataLoader>(make_loader(64, 8));
  }
  DataLoaders val_dataloader() override {
    calls.push_back("val_dataloader");
    DataLoaders out;
    for (int i = 0; i < val_sets_; ++i)
      out.push_back(std::make_shared<DataLoader>(std::make_shared<RandomDataset>(16 + 8 * i, 32, 99 + i),
                                                 DataLoaderOptions{.batch_size = 8}));
    return out;
  }
  DataLoaders test_dataloader() override { return val_dataloader(); }
  YAML::Node hparams() const override {
    YAML::Node n;
    n["val_sets"] = val_sets_;
    return n;
  }
  YAML::Node state_dict() const override {
    YAML::Node n;
    n["counter"] = counter;
    return n;
  }
  void load_state_dict(const YAML::Node& s) override { counter = s["counter"].as<int>(); }

  std::vector<std::string> calls;
  int counter = 0;

 private:
  int val_sets_;
};

/// Logs val_loss per loader and records which dataloader_idx each batch came with.
class MultiValModel : public BoringModel {
 public:
  using BoringModel::validation_step;
  void validation_step(const Batch& batch, int64_t, int64_t dataloader_idx) override {
    seen.push_back(dataloader_idx);
    auto out = forward(batch[0]);
    log("val_loss", torch::mse_loss(out, torch::ones_like(out)));
  }
  std::vector<int64_t> seen;
};

}  // namespace

TEST_CASE("fit with a data module runs its hooks in Lightning's order and trains as with its loaders",
          "[trainer][datamodule]") {
  const std::string root = temp_dir("dm-fit");
  auto o = quiet_options(root);
  o.max_epochs = 2;
  RecordingData dm;
  auto m1 = make_model(5);
  Trainer(o).fit(*m1, dm);
  CHECK(dm.calls ==
        std::vector<std::string>{"prepare_data", "setup:fit", "train_dataloader", "val_dataloader", "teardown:fit"});
  auto train = make_loader(64, 8);
  auto val =
      std::make_shared<DataLoader>(std::make_shared<RandomDataset>(16, 32, 99), DataLoaderOptions{.batch_size = 8});
  // Same data, same seed: the data module adds nothing to training.
  auto o2 = quiet_options(temp_dir("dm-fit-loaders2"));
  o2.max_epochs = 2;
  auto m3 = make_model(5);
  Trainer(o2).fit(*m3, train, val.get());
  CHECK(all_equal(snapshot(*m1), snapshot(*m3)));
}

TEST_CASE("a data module's state is saved in checkpoints and given back on resume", "[trainer][datamodule]") {
  const std::string root = temp_dir("dm-state");
  auto o = quiet_options(root);
  o.enable_checkpointing = true;
  o.max_steps = 3;
  RecordingData dm;
  dm.counter = 41;
  auto m = make_model(5);
  {
    Trainer t(o, {every_step_checkpoint()});
    t.fit(*m, dm);
    // trainer.save_checkpoint after fit still records the data module, as Lightning's (its
    // trainer keeps it), with its state as fit left it, though the data module is gone by then.
    dm.counter = 7;
    {
      RecordingData gone(3);
      gone.counter = 12;
      auto mg = make_model(5);
      auto og = o;
      og.default_root_dir = temp_dir("dm-state-gone");
      Trainer tg(og);
      tg.fit(*mg, gone);
      tg.save_checkpoint(og.default_root_dir + "/after.ckpt");
      const auto after = load_checkpoint_file(og.default_root_dir + "/after.ckpt");
      CHECK(after.meta["datamodule"]["counter"].as<int>() == 12);
      CHECK(after.meta["datamodule_hyper_parameters"]["val_sets"].as<int>() == 3);
      // A later fit with plain loaders has no data module to record.
      auto ml = make_model(5);
      DataLoader plain = make_loader(64, 8);
      tg.fit(*ml, plain);
      tg.save_checkpoint(og.default_root_dir + "/loaders.ckpt");
      const auto loaders = load_checkpoint_file(og.default_root_dir + "/loaders.ckpt");
      CHECK_FALSE(loaders.meta["datamodule"]);
      CHECK_FALSE(loaders.meta["datamodule_hyper_parameters"]);
    }
    t.save_checkpoint(root + "/after.ckpt");
    CHECK(load_checkpoint_file(root + "/after.ckpt").meta["datamodule"]["counter"].as<int>() == 41);
  }
  const auto ck = load_checkpoint_file(root + "/checkpoints/last.ckpt");
  CHECK(ck.meta["datamodule"]["counter"].as<int>() == 41);
  CHECK(ck.meta["datamodule_hyper_parameters"]["val_sets"].as<int>() == 1);
  RecordingData fresh;
  auto o2 = o;
  o2.max_steps = 4;
  auto m2 = make_model(6);
  Trainer(o2, {every_step_checkpoint()}).fit(*m2, fresh, "last");
  CHECK(fresh.counter == 41);
}

TEST_CASE("a data module without train_dataloader is a ConfigError naming the hook", "[trainer][datamodule]") {
  LightningDataModule empty;
  auto m = make_model(5);
  Trainer t(quiet_options(temp_dir("dm-empty")));
  CHECK_THROWS_WITH(t.fit(*m, empty), Contains("train_dataloader()"));
  CHECK_THROWS_WITH(t.test(*m, empty), Contains("test_dataloader()"));
}

TEST_CASE("several validation loaders: dataloader_idx and a metric per loader, as each alone",
          "[trainer][datamodule]") {
  RecordingData dm(2);
  auto m = make_model<MultiValModel>(5);
  Trainer t(quiet_options(temp_dir("dm-multival")));
  const auto metrics = t.validate(*m, dm);
  REQUIRE(metrics.count("val_loss/dataloader_idx_0"));
  REQUIRE(metrics.count("val_loss/dataloader_idx_1"));
  CHECK(metrics.count("val_loss") == 0);
  CHECK(m->seen == std::vector<int64_t>{0, 0, 1, 1, 1});  // 16 and 24 samples, batches of 8
  // Each loader alone gives the same mean.
  auto loaders = dm.val_dataloader();
  for (int d = 0; d < 2; ++d) {
    Trainer one(quiet_options(temp_dir("dm-multival-one")));
    const auto alone = one.validate(*m, *loaders[d]);
    CHECK(alone.at("val_loss") == Approx(metrics.at("val_loss/dataloader_idx_" + std::to_string(d))));
  }
}

TEST_CASE("fit validates on several loaders", "[trainer][datamodule]") {
  RecordingData dm(2);
  auto m = make_model<MultiValModel>(5);
  auto o = quiet_options(temp_dir("dm-fit-multival"));
  Trainer t(o);
  t.fit(*m, dm);
  CHECK(t.callback_metrics().count("val_loss/dataloader_idx_1"));
  CHECK(m->seen.size() == 5);
}
