// What a hostile or careless config used to get through silently, or with an unclear error: each
// is now refused (or warned about) in words that name the key and say what to do.
#include <spdlog/sinks/ostream_sink.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "boring_model.h"
#include "checkpoint/checkpoint_support.h"
#include "error_capture.h"
#include "trainer/trainer_support.h"
#include "volt/callbacks/device_stats_monitor.h"
#include "volt/callbacks/early_stopping.h"
#include "volt/callbacks/ema_weight_averaging.h"
#include "volt/callbacks/lr_monitor.h"
#include "volt/callbacks/model_checkpoint.h"
#include "volt/callbacks/prediction_writer.h"
#include "volt/callbacks/progress_bar.h"
#include "volt/callbacks/stochastic_weight_averaging.h"
#include "volt/callbacks/timer.h"
#include "volt/checkpoint/checkpoint.h"
#include "volt/checkpoint/checkpoint_reader.h"
#include "volt/checkpoint/weights.h"
#include "volt/cli/cli.h"
#include "volt/core/errors.h"
#include "volt/core/options.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {
/// Logs "val_loss" = nan from the second validation on.
struct NanValidation : BoringModel {
  void validation_step(const Batch& b, int64_t i) override {
    auto out = forward(b[0]);
    const double v = validations > 0 ? std::nan("") : torch::mse_loss(out, torch::ones_like(out)).item<double>();
    log("val_loss", torch::tensor(v));
  }
  void on_validation_epoch_end() override { ++validations; }
  int64_t validations = 0;
};

/// Counts predict_step calls.
struct CountingPredict : BoringModel {
  Batch predict_step(const Batch& b, int64_t) override {
    ++calls;
    return {forward(b[0])};
  }
  int64_t calls = 0;
};
}  // namespace

TEST_CASE("ModelCheckpoint refuses an empty filename, a negative train_time_interval, and it with every_n_train_steps",
          "[callbacks][checkpoint][refusals]") {
  ModelCheckpointOptions empty;
  empty.filename = "";
  CHECK_THAT(config_error([&] { ModelCheckpoint{empty}; }), Contains("filename") && Contains("empty"));
  ModelCheckpointOptions negative;
  negative.train_time_interval = -5;
  CHECK_THAT(config_error([&] { ModelCheckpoint{negative}; }), Contains("train_time_interval") && Contains(">= 0"));
  ModelCheckpointOptions both;
  both.every_n_train_steps = 3;
  both.train_time_interval = 60;
  CHECK_THAT(config_error([&] { ModelCheckpoint{both}; }), Contains("mutually exclusive"));
}

TEST_CASE("ModelCheckpoint refuses every_n_epochs beside another trigger, which would ignore it",
          "[callbacks][checkpoint][refusals]") {
  ModelCheckpointOptions steps;
  steps.every_n_train_steps = 1;
  steps.every_n_epochs = 2;
  CHECK_THAT(config_error([&] { ModelCheckpoint{steps}; }),
             Contains("every_n_epochs=2") && Contains("every_n_train_steps") && Contains("mutually exclusive"));
  ModelCheckpointOptions time = steps;
  time.every_n_train_steps = 0;
  time.train_time_interval = 60;
  CHECK_THAT(config_error([&] { ModelCheckpoint{time}; }), Contains("train_time_interval"));
  steps.every_n_epochs = 1;  // the default gives way, as Lightning's unset every_n_epochs
  CHECK_NOTHROW(ModelCheckpoint{steps});
}

TEST_CASE("Callbacks that would do nothing or contradict the Trainer's options are refused, as Lightning",
          "[callbacks][refusals]") {
  auto fit = [](TrainerOptions o, std::vector<std::shared_ptr<Callback>> cbs) {
    Trainer t(o, std::move(cbs));
    auto m = make_model(0);
    auto train = make_loader(16, 8);
    t.fit(*m, train);
  };
  auto run = [&](TrainerOptions o, std::vector<std::shared_ptr<Callback>> cbs) {
    return config_error([&] { fit(o, cbs); });
  };
  auto o = quiet_options(temp_dir("callback-refusals"));
  o.max_steps = 1;
  o.enable_progress_bar = true;
  CHECK_THAT(run(o, {std::make_shared<ProgressBar>(), std::make_shared<ProgressBar>()}),
             Contains("2 ProgressBar callbacks"));
  o.enable_progress_bar = false;
  CHECK_THAT(run(o, {std::make_shared<ProgressBar>()}), Contains("trainer.enable_progress_bar"));
  o.logger = false;
  CHECK_THAT(run(o, {std::make_shared<LearningRateMonitor>()}),
             Contains("LearningRateMonitor") && Contains("trainer.logger"));
  CHECK_THAT(run(o, {std::make_shared<DeviceStatsMonitor>()}), Contains("DeviceStatsMonitor"));
  o.fast_dev_run = true;  // logs nowhere on purpose (DummyLogger): not a misconfiguration
  o.logger = true;
  CHECK_NOTHROW(fit(o, {std::make_shared<LearningRateMonitor>()}));
  // enable_checkpointing: false beside a ModelCheckpoint (Lightning raises too). fast_dev_run turns
  // checkpointing off itself and keeps the callback, which saves nothing then.
  CHECK_NOTHROW(fit(o, {std::make_shared<ModelCheckpoint>()}));
  o.fast_dev_run = false;
  CHECK_THAT(run(o, {std::make_shared<ModelCheckpoint>()}),
             Contains("trainer.enable_checkpointing") && Contains("ModelCheckpoint"));
  CHECK_THAT(config_error([&] {
               Trainer t(o, {std::make_shared<ModelCheckpoint>()});
               auto m = make_model(0);
               auto val = make_loader(8, 8);
               t.validate(*m, val);
             }),
             Contains("trainer.enable_checkpointing"));
  o.enable_checkpointing = true;
  CHECK_NOTHROW(fit(o, {std::make_shared<ModelCheckpoint>()}));
  // The Trainer's options refuse a plugin given twice.
  TrainerOptions twice;
  twice.plugins = {"AsyncCheckpointIO", "AsyncCheckpointIO"};
  CHECK_THAT(config_error([&] { twice.validate(); }), Contains("trainer.plugins[1]") && Contains("twice"));
}

TEST_CASE("ModelCheckpoint whose monitor is never logged fails once validation has run, as Lightning",
          "[callbacks][checkpoint][refusals]") {
  auto o = quiet_options(temp_dir("monitor-missing"));
  o.enable_checkpointing = true;
  o.max_epochs = 2;
  ModelCheckpointOptions mo;
  mo.monitor = "val_los";  // a typo of val_loss
  Trainer t(o, {std::make_shared<ModelCheckpoint>(mo)});
  auto m = make_model(0);
  auto train = make_loader(16, 8);
  auto val = make_loader(16, 8);
  CHECK_THAT(config_error([&] { t.fit(*m, train, &val); }),
             Contains("monitor='val_los'") && Contains("val_loss") && Contains("log('val_los', value)"));
}

TEST_CASE("durations: a negative DD:HH:MM:SS and an overflowing one are refused", "[callbacks][timer][refusals]") {
  CHECK_THAT(config_error([] { options_from_yaml<TrainerOptions>(YAML::Load("max_time: '-00:00:00:05'"), "trainer"); }),
             Contains("trainer.max_time") && Contains("not a duration"));
  CHECK_THAT(config_error([] { options_from_yaml<TimerOptions>(YAML::Load("duration: {seconds: 1e300}"), "Timer"); }),
             Contains("Timer.duration") && Contains("999999999 days"));
  CHECK(options_from_yaml<TimerOptions>(YAML::Load("duration: '01:00:00:05'"), "Timer").duration->seconds == 86405);
}

TEST_CASE("EarlyStopping on a nan metric says it is not finite", "[callbacks][refusals]") {
  auto o = quiet_options(temp_dir("early-nan"));
  o.max_epochs = 5;
  EarlyStoppingOptions eo;
  auto es = std::make_shared<EarlyStopping>(eo);
  Trainer t(o, {es});
  NanValidation m;
  auto train = make_loader(16, 8);
  auto val = make_loader(16, 8);
  Logs logs;
  t.fit(m, train, &val);
  CHECK(t.current_epoch() < 4);  // stopped at the first nan, not after 5 epochs
  CHECK_THAT(logs.text.str(),
             Contains("Monitored metric val_loss = nan is not finite") && !Contains("did not improve"));
}

TEST_CASE("PredictionWriter into a folder it cannot write fails before the first batch, and an earlier run's files go",
          "[callbacks][predict][refusals]") {
  const std::string root = temp_dir("predict-writer");
  { std::ofstream(root + "/a-file") << "x"; }
  // The section names must not hold `root`: it differs on each run of the test case, and Catch
  // would take each as a new section and run the case forever.
  for (const std::string where : {"/proc/self", "<root>/a-file/sub"}) {
    DYNAMIC_SECTION(where) {
      const std::string dir = where == "/proc/self" ? where : root + "/a-file/sub";
      PredictionWriterOptions wo;
      wo.output_dir = dir;
      Trainer t(quiet_options(root), {std::make_shared<PredictionWriter>(wo)});
      CountingPredict m;
      auto loader = make_loader(16, 8);
      CHECK_THAT(config_error([&] { t.predict(m, loader, "", false); }), Contains(dir) && Contains("output_dir"));
      CHECK(m.calls == 0);
    }
  }
  SECTION("an earlier run's batch files are removed") {
    PredictionWriterOptions wo;
    wo.output_dir = root + "/pred";
    wo.write_interval = "batch";
    {
      Trainer t(quiet_options(root), {std::make_shared<PredictionWriter>(wo)});
      CountingPredict m;
      auto loader = make_loader(24, 8);  // 3 batches
      t.predict(m, loader, "", false);
    }
    CHECK(fs::exists(root + "/pred/rank_0/dataloader_0/batch_2.pt"));
    // An earlier predict on 2 ranks left rank 1's files: no rank of this run writes there.
    fs::create_directories(root + "/pred/rank_1/dataloader_0");
    std::ofstream(root + "/pred/rank_1/dataloader_0/batch_0.pt") << "x";
    std::ofstream(root + "/pred/rank_1.pt") << "x";
    std::ofstream(root + "/pred/rank_1.notes") << "x";  // not a file of the writer's: kept
    Trainer t(quiet_options(root), {std::make_shared<PredictionWriter>(wo)});
    CountingPredict m;
    auto loader = make_loader(8, 8);  // 1 batch
    t.predict(m, loader, "", false);
    CHECK(fs::exists(root + "/pred/rank_0/dataloader_0/batch_0.pt"));
    CHECK_FALSE(fs::exists(root + "/pred/rank_0/dataloader_0/batch_2.pt"));
    CHECK_FALSE(fs::exists(root + "/pred/rank_1"));
    CHECK_FALSE(fs::exists(root + "/pred/rank_1.pt"));
    CHECK(fs::exists(root + "/pred/rank_1.notes"));
  }
}

TEST_CASE("predict and test with no sample at all warn", "[trainer][refusals]") {
  Trainer t(quiet_options(temp_dir("empty-predict")));
  CountingPredict m;
  auto loader = make_loader(0, 8);
  Logs logs;
  t.predict(m, loader, "", false);
  t.test(m, loader);
  CHECK_THAT(logs.text.str(),
             Contains("predict: the dataloaders hold no sample") && Contains("test: the dataloaders hold no sample"));
}

TEST_CASE("a safetensors file as ckpt_path says what it is and how to load its weights", "[checkpoint][refusals]") {
  const std::string dir = temp_dir("ckpt-safetensors");
  auto m = make_model(0);
  save_safetensors(*m, dir + "/w.safetensors");
  const std::string msg = checkpoint_error([&] { CheckpointReader r(dir + "/w.safetensors"); });
  CHECK_THAT(msg, Contains("is a safetensors file") && Contains("load_weights"));
  auto o = quiet_options(dir);
  Trainer t(o);
  auto train = make_loader(16, 8);
  CHECK_THROWS_WITH(t.fit(*m, train, nullptr, dir + "/w.safetensors"), Contains("safetensors file"));
}

TEST_CASE("an override value keeps a '#' that YAML would read as a comment", "[core][refusals]") {
  YAML::Node root(YAML::NodeType::Map);
  apply_override(root, "trainer.default_root_dir", "runs/x #1");
  CHECK(root["trainer"]["default_root_dir"].as<std::string>() == "runs/x #1");
  apply_override(root, "model.name", "#1");
  CHECK(root["model"]["name"].as<std::string>() == "#1");
  apply_override(root, "model.quoted", "'a #b'");
  CHECK(root["model"]["quoted"].as<std::string>() == "a #b");
  apply_override(root, "model.lr", "0.1");
  CHECK(root["model"]["lr"].as<double>() == 0.1);
}

TEST_CASE("a config file of many megabytes is refused at once, naming it", "[cli][refusals]") {
  const std::string path = temp_dir("huge-config") + "/huge.yaml";
  {
    std::ofstream out(path);
    out << "model:\n  data: [";
    for (int i = 0; i < 2'000'000; ++i) out << "12345,";
    out << "0]\n";
  }
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THAT(config_error([&] { cli::load_configs({path}, {}); }), Contains(path) && Contains("MiB"));
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 1.0);
}

TEST_CASE("ModelCheckpoint.filename may not lead out of its folder", "[callbacks][checkpoint][refusals]") {
  for (const std::string bad : {"../x-{step}", "a/../../x", "/tmp/x-{step}", ".."}) {
    INFO(bad);
    ModelCheckpointOptions o;
    o.filename = bad;
    CHECK_THAT(config_error([&] { ModelCheckpoint{o}; }), Contains("ModelCheckpoint.filename") && Contains(bad));
  }
  ModelCheckpointOptions sub;
  sub.filename = "run/{epoch}-{step}..x";  // a subfolder, and dots inside a name
  ModelCheckpoint ok{sub};
}

TEST_CASE("callbacks' states: keys as Lightning's, two under one key refused, a missing one warned about",
          "[callbacks][checkpoint][refusals]") {
  ModelCheckpointOptions best;
  best.monitor = "val_loss";
  best.mode = "max";
  CHECK(ModelCheckpoint(best).state_key() ==
        "ModelCheckpoint{'monitor': 'val_loss', 'mode': 'max', 'every_n_train_steps': 0, 'every_n_epochs': 1, "
        "'train_time_interval': None}");
  ModelCheckpointOptions timed;
  timed.train_time_interval = 90061.5;
  CHECK(ModelCheckpoint(timed).state_key() ==
        "ModelCheckpoint{'monitor': None, 'mode': 'min', 'every_n_train_steps': 0, 'every_n_epochs': 0, "
        "'train_time_interval': datetime.timedelta(days=1, seconds=3661, microseconds=500000)}");
  CHECK(EarlyStopping(EarlyStoppingOptions{}).state_key() == "EarlyStopping{'monitor': 'val_loss', 'mode': 'min'}");

  const std::string root = temp_dir("callback-keys");
  auto o = quiet_options(root);
  o.enable_checkpointing = true;
  o.max_steps = 4;
  o.val_check_interval = BatchLimit::count(2);
  auto val = make_loader(16, 8);
  {
    // Two ModelCheckpoints with the same monitor, mode and triggers, in two folders: refused.
    ModelCheckpointOptions a, b;
    a.dirpath = root + "/a";
    b.dirpath = root + "/b";
    Trainer t(o, {std::make_shared<ModelCheckpoint>(a), std::make_shared<ModelCheckpoint>(b)});
    auto m = make_model(0);
    auto train = make_loader(64, 8);
    CHECK_THAT(config_error([&] { t.fit(*m, train, &val); }),
               Contains("two callbacks with the state key 'ModelCheckpoint{") && Contains("overwrite each other"));
  }
  // Two that differ keep their own states, and each gets its own back on resume.
  ModelCheckpointOptions every, top;
  every.dirpath = root + "/every";
  every.every_n_train_steps = 1;
  every.save_last = true;
  top.dirpath = root + "/top";
  top.monitor = "val_loss";
  {
    Trainer t(o, {std::make_shared<ModelCheckpoint>(every), std::make_shared<ModelCheckpoint>(top)});
    auto m = make_model(0);
    auto train = make_loader(64, 8);
    t.fit(*m, train, &val);
  }
  const Checkpoint last = load_checkpoint_file(root + "/every/last.ckpt");
  CHECK(last.meta["callbacks"][ModelCheckpoint(every).state_key()]);
  CHECK(last.meta["callbacks"][ModelCheckpoint(top).state_key()]["best_model_path"].as<std::string>().rfind(
            root + "/top/", 0) == 0);
  {
    auto o2 = o;
    o2.max_steps = 6;
    auto e = std::make_shared<ModelCheckpoint>(every);
    auto k = std::make_shared<ModelCheckpoint>(top);
    Trainer t(o2, {e, k});
    auto m = make_model(0);
    auto train = make_loader(64, 8);
    t.fit(*m, train, &val, root + "/every/last.ckpt");
    CHECK(k->best_model_path().rfind(root + "/top/", 0) == 0);
    CHECK(e->best_model_path().rfind(root + "/every/", 0) == 0);
  }
  {
    // Resumed without the callbacks that wrote the checkpoint: a warning names their states.
    auto o3 = quiet_options(temp_dir("callback-keys-missing"));
    o3.max_steps = 6;
    Trainer t(o3);
    auto m = make_model(0);
    auto train = make_loader(64, 8);
    Logs logs;
    t.fit(*m, train, &val, root + "/every/last.ckpt");
    CHECK_THAT(logs.text.str(), Contains("holds the state of callbacks this fit does not have") &&
                                    Contains("ModelCheckpoint{'monitor': 'val_loss'"));
  }
}

TEST_CASE("two weight-averaging callbacks in one Trainer are refused", "[callbacks][weight_averaging][refusals]") {
  auto o = quiet_options(temp_dir("two-averaging"));
  o.max_steps = 2;
  StochasticWeightAveragingOptions swa;
  swa.swa_lrs.values = {0.01};
  const std::vector<std::pair<std::shared_ptr<Callback>, std::shared_ptr<Callback>>> pairs = {
      {std::make_shared<EMAWeightAveraging>(), std::make_shared<WeightAveraging>()},
      {std::make_shared<EMAWeightAveraging>(), std::make_shared<StochasticWeightAveraging>(swa)}};
  for (const auto& [a, b] : pairs) {
    Trainer t(o, {a, b});
    auto m = make_model(0);
    auto train = make_loader(64, 8);
    CHECK_THAT(config_error([&] { t.fit(*m, train); }),
               Contains("two weight-averaging callbacks") && Contains("EMAWeightAveraging") && Contains("keep one"));
  }
}
