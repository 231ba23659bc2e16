// ModelCheckpoint's remaining Lightning options: save_last "link", auto_insert_metric_name,
// enable_version_counter, save_on_train_epoch_end, every_n_epochs, train_time_interval,
// save_weights_only, and how YAML spells them.
#include <torch/torch.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "boring_model.h"
#include "error_capture.h"
#include "trainer/trainer_support.h"
#include "volt/callbacks/model_checkpoint.h"
#include "volt/checkpoint/checkpoint.h"
#include "volt/checkpoint/checkpoint_reader.h"
#include "volt/core/errors.h"
#include "volt/core/options.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

/// Logs val_loss = script(number of validations so far) in every validation step.
class ScriptedValidation : public BoringModel {
 public:
  explicit ScriptedValidation(std::function<double(int64_t)> script, BoringOptions o = {})
      : BoringModel(o), script_(std::move(script)) {}
  void validation_step(const Batch&, int64_t) override { log("val_loss", script_(validations)); }
  void on_validation_epoch_end() override { ++validations; }
  int64_t validations = 0;

 private:
  std::function<double(int64_t)> script_;
};

/// Sleeps in every training step, so that a time interval spans a known number of steps at most.
class SlowModel : public BoringModel {
 public:
  torch::Tensor training_step(const Batch& b, int64_t i) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return BoringModel::training_step(b, i);
  }
};

/// `epochs` epochs of `batches` training batches; checkpointing on.
TrainerOptions run_options(const std::string& root, int64_t epochs, int64_t batches) {
  auto o = quiet_options(root);
  o.max_epochs = epochs;
  o.limit_train_batches = BatchLimit::count(batches);
  o.limit_val_batches = BatchLimit::count(1);
  o.enable_checkpointing = true;
  return o;
}

std::set<std::string> listing(const std::string& dir) {
  std::set<std::string> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

bool params_equal(torch::nn::Module& a, torch::nn::Module& b) { return all_equal(snapshot(a), snapshot(b)); }

/// The names a ModelCheckpoint with `mo` writes in a fit of `o`, with a validation loader when `val`.
std::set<std::string> names_of(ModelCheckpointOptions mo, TrainerOptions o, bool val) {
  mo.dirpath = o.default_root_dir + "/ck";
  Trainer t(o, {std::make_shared<ModelCheckpoint>(mo)});
  auto m = make_model(0);
  auto train = make_loader(64, 8), v = make_loader(16, 8);
  t.fit(*m, train, val ? &v : nullptr);
  return listing(mo.dirpath);
}

}  // namespace

TEST_CASE("save_last 'link': last.ckpt links the newest checkpoint, and 'last' resumes through it",
          "[callbacks][checkpoint_options]") {
  const std::string root = temp_dir("ckpt-link");
  const std::string dir = root + "/checkpoints";
  ModelCheckpointOptions mo;
  mo.save_last = SaveLast::Mode::link;
  mo.save_top_k = -1;
  {
    Trainer t(run_options(root, 3, 2), {std::make_shared<ModelCheckpoint>(mo)});
    auto m = make_model(0);
    auto train = make_loader();
    t.fit(*m, train);
  }
  CHECK(listing(dir) ==
        std::set<std::string>{"epoch=0-step=2.ckpt", "epoch=1-step=4.ckpt", "epoch=2-step=6.ckpt", "last.ckpt"});
  REQUIRE(fs::is_symlink(dir + "/last.ckpt"));
  CHECK(fs::read_symlink(dir + "/last.ckpt") == "epoch=2-step=6.ckpt");  // relative: the folder may move
  CHECK(CheckpointReader(dir + "/last.ckpt").global_step() == 6);

  // Uninterrupted 4 epochs, and the first run resumed from "last" to 4 epochs.
  auto full = make_model(0);
  {
    Trainer t(run_options(temp_dir("ckpt-link-full"), 4, 2));
    auto train = make_loader();
    t.fit(*full, train);
  }
  auto mc = std::make_shared<ModelCheckpoint>(mo);
  Trainer t(run_options(root, 4, 2), {mc});
  CHECK(mc->last_model_path_on_disk(t) == fs::canonical(dir + "/epoch=2-step=6.ckpt").string());
  auto resumed = make_model(7);
  auto train = make_loader();
  Logs logs;
  t.fit(*resumed, train, nullptr, "last");
  CHECK_THAT(logs.text.str(), Contains("epoch=2-step=6.ckpt"));  // the link's target is named
  CHECK(t.global_step() == 8);
  CHECK(params_equal(*resumed, *full));
  CHECK(fs::read_symlink(dir + "/last.ckpt") == "epoch=3-step=8.ckpt");
  CHECK_FALSE(fs::exists(dir + "/last-v1.ckpt"));  // the resumed run keeps its last.ckpt

  // A link whose target is gone is refused, naming both.
  fs::remove(dir + "/epoch=3-step=8.ckpt");
  Trainer again(run_options(root, 5, 2), {std::make_shared<ModelCheckpoint>(mo)});
  auto m = make_model(0);
  try {
    again.fit(*m, train, nullptr, "last");
    FAIL("resumed through a dangling link");
  } catch (const CheckpointError& e) {
    CHECK_THAT(e.what(), Contains("last.ckpt") && Contains("epoch=3-step=8.ckpt") && Contains("no longer exists"));
  }
}

TEST_CASE("save_last 'link' writes a copy when no checkpoint of this step was saved",
          "[callbacks][checkpoint_options]") {
  SECTION("save_top_k 0: nothing to link") {
    const std::string root = temp_dir("ckpt-link-none");
    ModelCheckpointOptions mo;
    mo.save_last = "link";
    mo.save_top_k = 0;
    Trainer t(run_options(root, 2, 2), {std::make_shared<ModelCheckpoint>(mo)});
    auto m = make_model(0);
    auto train = make_loader();
    t.fit(*m, train);
    CHECK(listing(root + "/checkpoints") == std::set<std::string>{"last.ckpt"});
    CHECK(fs::is_regular_file(fs::symlink_status(root + "/checkpoints/last.ckpt")));
    CHECK(CheckpointReader(root + "/checkpoints/last.ckpt").global_step() == 4);
  }
  SECTION("a monitor that did not improve: the best is older than the last state") {
    const std::string root = temp_dir("ckpt-link-stale");
    ModelCheckpointOptions mo;
    mo.save_last = "link";
    mo.monitor = "val_loss";
    Trainer t(run_options(root, 3, 2), {std::make_shared<ModelCheckpoint>(mo)});
    auto m = make_model<ScriptedValidation>(0, [](int64_t i) { return std::vector<double>{0.5, 0.3, 0.9}.at(i); });
    auto train = make_loader(), val = make_loader(16);
    t.fit(*m, train, &val);
    const std::string last = root + "/checkpoints/last.ckpt";
    // Epoch 2 (0.9) is not among the best: last.ckpt is a copy of step 6, the best stays epoch 1's.
    CHECK(listing(root + "/checkpoints") == std::set<std::string>{"epoch=1-step=4.ckpt", "last.ckpt"});
    CHECK_FALSE(fs::is_symlink(last));
    CHECK(CheckpointReader(last).global_step() == 6);
  }
}

TEST_CASE("save_last 'link' with sharded checkpoints links the folder", "[callbacks][checkpoint_options]") {
  const std::string root = temp_dir("ckpt-link-sharded");
  auto o = quiet_options(root);
  o.enable_checkpointing = true;
  o.max_epochs = -1;
  o.max_steps = 4;
  o.strategy = "fsdp";
  o.strategy.fsdp.state_dict_type = StateDictType::Sharded;
  o.strategy.fsdp.auto_wrap_policy.module_types = {"Block"};
  ModelCheckpointOptions mo;
  mo.save_last = "link";
  mo.every_n_train_steps = 2;
  {
    Trainer t(o, {std::make_shared<ModelCheckpoint>(mo)});
    auto m = make_model(0);
    auto train = make_loader(32, 8);
    t.fit(*m, train);
  }
  const std::string last = root + "/checkpoints/last.ckpt";
  REQUIRE(fs::is_symlink(last));
  CHECK(fs::read_symlink(last) == "epoch=0-step=4.ckpt");
  CHECK(fs::is_directory(last));
  CHECK(CheckpointReader(last).global_step() == 4);
  // Resumed through the link; the older folder of top 1 is gone, the link follows the new one.
  o.max_steps = 6;
  Trainer t(o, {std::make_shared<ModelCheckpoint>(mo)});
  auto m = make_model(1);
  auto train = make_loader(32, 8);
  t.fit(*m, train, nullptr, "last");
  CHECK(t.global_step() == 6);
  CHECK(fs::read_symlink(last) == "epoch=1-step=6.ckpt");
  CHECK(listing(root + "/checkpoints") == std::set<std::string>{"epoch=1-step=6.ckpt", "last.ckpt"});
}

TEST_CASE("save_last, save_on_train_epoch_end and train_time_interval in YAML", "[callbacks][checkpoint_options]") {
  auto read = [](const std::string& yaml) {
    return options_from_yaml<ModelCheckpointOptions>(YAML::Load(yaml), "trainer.callbacks[0].init_args");
  };
  CHECK(read("save_last: link").save_last == SaveLast::Mode::link);
  CHECK(read("save_last: true").save_last == SaveLast::Mode::copy);
  CHECK(read("save_last: false").save_last == SaveLast::Mode::off);
  CHECK(read("save_last: null").save_last == SaveLast::Mode::off);
  CHECK(read("{}").save_last == SaveLast::Mode::off);
  for (const char* bad : {"save_last: copy", "save_last: 2", "save_last: [link]"})
    CHECK_THAT(config_error([&] { read(bad); }),
               Contains("trainer.callbacks[0].init_args.save_last") && Contains("'link'"));
  CHECK_THAT(config_error([] { SaveLast s("links"); }), Contains("save_last"));
  CHECK(options_to_yaml(read("save_last: link"))["save_last"].as<std::string>() == "link");
  CHECK(options_to_yaml(read("save_last: true"))["save_last"].as<bool>());
  CHECK(read("save_last: link").save_last == read(YAML::Dump(options_to_yaml(read("save_last: link")))).save_last);

  CHECK_FALSE(read("{}").save_on_train_epoch_end.has_value());
  CHECK(read("save_on_train_epoch_end: false").save_on_train_epoch_end == std::optional<bool>(false));
  CHECK(read("{}").enable_version_counter);
  CHECK_FALSE(read("enable_version_counter: false").enable_version_counter);
  CHECK_FALSE(read("auto_insert_metric_name: false").auto_insert_metric_name);

  CHECK(read("train_time_interval: 90").train_time_interval.seconds == 90);
  CHECK(read("train_time_interval: 1:00:00").train_time_interval.seconds == 3600);
  CHECK(read("train_time_interval: '0:00:01.5'").train_time_interval.seconds == 1.5);
  CHECK(read("train_time_interval: '2 days, 0:00:01'").train_time_interval.seconds == 172801);
  CHECK(read("train_time_interval: '1 day, 1:00:00'").train_time_interval.seconds == 90000);
  for (const char* bad : {"train_time_interval: '1:5:00'", "train_time_interval: 'soon'"})
    CHECK_THAT(config_error([&] { read(bad); }), Contains("trainer.callbacks[0].init_args.train_time_interval"));
}

TEST_CASE("auto_insert_metric_name: 'epoch=3-val_loss=0.12' or '3-0.12'", "[callbacks][checkpoint_options]") {
  for (const bool insert : {true, false}) {
    DYNAMIC_SECTION("auto_insert_metric_name " << insert) {
      const std::string root = temp_dir("ckpt-insert");
      ModelCheckpointOptions mo;
      mo.monitor = "val_loss";
      mo.filename = "{epoch}-{val_loss:.2f}";
      mo.auto_insert_metric_name = insert;
      Trainer t(run_options(root, 4, 2), {std::make_shared<ModelCheckpoint>(mo)});
      auto m = make_model<ScriptedValidation>(0, [](int64_t i) {
        return std::vector<double>{0.5, 0.4, 0.3, 0.123}.at(i);
      });
      auto train = make_loader(), val = make_loader(16);
      t.fit(*m, train, &val);
      CHECK(listing(root + "/checkpoints") ==
            std::set<std::string>{insert ? "epoch=3-val_loss=0.12.ckpt" : "3-0.12.ckpt"});
    }
  }
}

TEST_CASE("enable_version_counter: a name on disk gets -v1, or is overwritten", "[callbacks][checkpoint_options]") {
  const std::string root = temp_dir("ckpt-versions");
  const std::string dir = root + "/checkpoints";
  ModelCheckpointOptions mo;
  mo.save_last = true;
  auto fit = [&](ModelCheckpointOptions o, uint64_t seed) {
    auto mc = std::make_shared<ModelCheckpoint>(o);
    Trainer t(run_options(root, 1, 2), {mc});
    auto m = make_model(seed);
    auto train = make_loader();
    t.fit(*m, train);
    return std::make_pair(mc->best_model_path(), mc->last_model_path_on_disk(t));
  };
  fit(mo, 0);
  REQUIRE(listing(dir) == std::set<std::string>{"epoch=0-step=2.ckpt", "last.ckpt"});
  const auto first = fs::last_write_time(dir + "/epoch=0-step=2.ckpt");
  const auto first_last = fs::last_write_time(dir + "/last.ckpt");

  // An earlier run's files keep theirs; "last" is this run's newest.
  auto [best, last] = fit(mo, 1);
  CHECK(listing(dir) ==
        std::set<std::string>{"epoch=0-step=2.ckpt", "epoch=0-step=2-v1.ckpt", "last.ckpt", "last-v1.ckpt"});
  CHECK(fs::path(best).filename() == "epoch=0-step=2-v1.ckpt");
  CHECK(fs::path(last).filename() == "last-v1.ckpt");
  CHECK(fs::last_write_time(dir + "/epoch=0-step=2.ckpt") == first);
  CHECK(fs::last_write_time(dir + "/last.ckpt") == first_last);

  // Off: the names are overwritten, no -v2 appears, and last.ckpt is the newest again.
  mo.enable_version_counter = false;
  auto [best2, last2] = fit(mo, 2);
  CHECK(listing(dir) ==
        std::set<std::string>{"epoch=0-step=2.ckpt", "epoch=0-step=2-v1.ckpt", "last.ckpt", "last-v1.ckpt"});
  CHECK(fs::path(best2).filename() == "epoch=0-step=2.ckpt");
  CHECK(fs::last_write_time(dir + "/epoch=0-step=2.ckpt") != first);
  CHECK(fs::path(last2).filename() == "last.ckpt");
}

TEST_CASE("save_on_train_epoch_end: at the epoch's end, after validation, or Lightning's rule",
          "[callbacks][checkpoint_options]") {
  ModelCheckpointOptions mo;
  mo.save_top_k = -1;
  const std::set<std::string> every_validation = {"epoch=0-step=2.ckpt", "epoch=0-step=4.ckpt", "epoch=1-step=6.ckpt",
                                                  "epoch=1-step=8.ckpt"};
  const std::set<std::string> epoch_ends = {"epoch=0-step=4.ckpt", "epoch=1-step=8.ckpt"};
  auto o = run_options("", 2, 4);
  o.val_check_interval = BatchLimit::fraction(0.5);  // validation after batches 2 and 4
  SECTION("unset, validation twice an epoch: after each validation") {
    o.default_root_dir = temp_dir("ckpt-sotee");
    CHECK(names_of(mo, o, true) == every_validation);
  }
  SECTION("true: at the epoch's end only") {
    o.default_root_dir = temp_dir("ckpt-sotee");
    mo.save_on_train_epoch_end = true;
    CHECK(names_of(mo, o, true) == epoch_ends);
  }
  SECTION("false: after validation, so nothing without a validation loop") {
    o.default_root_dir = temp_dir("ckpt-sotee");
    mo.save_on_train_epoch_end = false;
    CHECK(names_of(mo, o, true) == every_validation);
    o.default_root_dir = temp_dir("ckpt-sotee");
    CHECK(names_of(mo, o, false).empty());
  }
  SECTION("unset, no validation loop: at the epoch's end") {
    o.default_root_dir = temp_dir("ckpt-sotee");
    CHECK(names_of(mo, o, false) == epoch_ends);
  }
  SECTION("unset, validation every other epoch: after it") {
    o.default_root_dir = temp_dir("ckpt-sotee");
    o.val_check_interval = BatchLimit::fraction(1.0);
    o.check_val_every_n_epoch = 2;
    o.max_epochs = 4;
    CHECK(names_of(mo, o, true) == std::set<std::string>{"epoch=1-step=8.ckpt", "epoch=3-step=16.ckpt"});
  }
}

TEST_CASE("every_n_epochs keeps every n-th epoch, last.ckpt follows every epoch", "[callbacks][checkpoint_options]") {
  const std::string root = temp_dir("ckpt-n-epochs");
  ModelCheckpointOptions mo;
  mo.save_top_k = -1;
  mo.every_n_epochs = 2;
  mo.save_last = true;
  mo.dirpath = root + "/ck";
  // last.ckpt as each epoch starts (checkpoint callbacks run after the others at an epoch's end).
  struct LastSeen : Callback {
    std::string dir;
    std::vector<int64_t> steps;
    std::string state_key() const override { return "LastSeen"; }
    void on_train_epoch_start(Trainer&, LightningModule&) override {
      if (fs::exists(dir + "/last.ckpt")) steps.push_back(CheckpointReader(dir + "/last.ckpt").global_step());
    }
  };
  auto seen = std::make_shared<LastSeen>();
  seen->dir = mo.dirpath;
  Trainer t(run_options(root, 5, 2), {std::make_shared<ModelCheckpoint>(mo), seen});
  auto m = make_model(0);
  auto train = make_loader();
  t.fit(*m, train);
  CHECK(listing(mo.dirpath) == std::set<std::string>{"epoch=1-step=4.ckpt", "epoch=3-step=8.ckpt", "last.ckpt"});
  CHECK(seen->steps == std::vector<int64_t>{2, 4, 6, 8});
  CHECK(CheckpointReader(mo.dirpath + "/last.ckpt").global_step() == 10);
  mo.every_n_epochs = 0;  // only last.ckpt
  CHECK(names_of(mo, run_options(temp_dir("ckpt-n-epochs"), 2, 2), false) == std::set<std::string>{"last.ckpt"});
}

TEST_CASE("train_time_interval saves at least once per interval", "[callbacks][checkpoint_options]") {
  const std::string root = temp_dir("ckpt-time");
  ModelCheckpointOptions mo;
  mo.save_top_k = -1;
  mo.filename = "{step}";
  mo.train_time_interval = TimeInterval::parse("0:00:00.2", "train_time_interval");
  auto o = run_options(root, 1, 12);
  Trainer t(o, {std::make_shared<ModelCheckpoint>(mo)});
  auto m = make_model<SlowModel>(0);
  auto train = make_loader(96, 8);
  t.fit(*m, train);
  // Each step takes 50 ms or more: 0.2 s have passed after 4 steps at the latest.
  std::vector<int64_t> steps;
  for (const auto& f : listing(root + "/checkpoints")) steps.push_back(std::stoll(f.substr(5)));
  std::sort(steps.begin(), steps.end());
  INFO(steps.size() << " checkpoints");
  REQUIRE(steps.size() >= 3);
  CHECK(steps.front() <= 4);
  for (size_t i = 1; i < steps.size(); ++i) CHECK(steps[i] - steps[i - 1] <= 4);
  // No trigger at the epoch's end: the time decides alone.
  CHECK(steps.size() < 12);
}

TEST_CASE("save_weights_only: no optimizer state, and a resume from it says the optimizer starts fresh",
          "[callbacks][checkpoint_options]") {
  BoringOptions adam;
  adam.adam = true;
  for (const bool weights_only : {false, true}) {
    DYNAMIC_SECTION("save_weights_only " << weights_only) {
      const std::string root = temp_dir("ckpt-weights-only");
      ModelCheckpointOptions mo;
      mo.save_weights_only = weights_only;
      mo.filename = "ck";
      {
        Trainer t(run_options(root, 1, 2), {std::make_shared<ModelCheckpoint>(mo)});
        auto m = make_model(0, adam);
        auto train = make_loader();
        t.fit(*m, train);
      }
      const std::string path = root + "/checkpoints/ck.ckpt";
      CHECK(CheckpointReader(path).names(kOptimizerSection).empty() == weights_only);
      Trainer t(run_options(temp_dir("ckpt-weights-only-resume"), 2, 2));
      auto m = make_model(1, adam);
      auto train = make_loader();
      Logs logs;
      t.fit(*m, train, nullptr, path);
      CHECK(t.global_step() == 4);  // the loops' position travels with the weights
      const bool warned = logs.text.str().find("has no optimizer state") != std::string::npos &&
                          logs.text.str().find("the optimizer starts fresh") != std::string::npos;
      CHECK(warned == weights_only);
    }
  }
}
