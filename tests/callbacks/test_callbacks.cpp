#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "boring_model.h"
#include "error_capture.h"
#include "volt/callbacks/early_stopping.h"
#include "volt/callbacks/lr_monitor.h"
#include "volt/callbacks/model_checkpoint.h"
#include "volt/callbacks/model_summary.h"
#include "volt/checkpoint/checkpoint.h"
#include "volt/core/errors.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

/// Logs val_loss = script(epoch) in every validation step: a known value per epoch.
class ScriptedVal : public BoringModel {
 public:
  explicit ScriptedVal(std::function<double(int64_t)> script, std::string name = "val_loss")
      : script_(std::move(script)), name_(std::move(name)) {}
  void validation_step(const Batch&, int64_t) override { log(name_, script_(trainer()->current_epoch())); }
  void on_train_epoch_start() override { ++epochs_started; }
  int64_t epochs_started = 0;

 private:
  std::function<double(int64_t)> script_;
  std::string name_;
};

template <class M = BoringModel, class... Args>
std::shared_ptr<M> make_model(uint64_t seed, Args&&... args) {
  torch::manual_seed(seed);
  return std::make_shared<M>(std::forward<Args>(args)...);
}

DataLoader make_loader(int64_t n = 64, int64_t batch_size = 8) {
  DataLoaderOptions o;
  o.batch_size = batch_size;
  return DataLoader(std::make_shared<RandomDataset>(n), o);
}

/// Options for runs of `epochs` epochs of `batches` training batches and one validation batch.
TrainerOptions short_options(const std::string& root, int64_t epochs, int64_t batches) {
  auto o = quiet_options(root);
  o.max_epochs = epochs;
  o.limit_train_batches = BatchLimit::count(batches);
  o.limit_val_batches = BatchLimit::count(1);
  return o;
}

std::set<std::string> listing(const std::string& dir) {
  std::set<std::string> out;
  if (!fs::exists(dir)) return out;
  for (auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

bool params_equal(torch::nn::Module& a, torch::nn::Module& b) {
  auto x = a.parameters(), y = b.parameters();
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i)
    if (!torch::equal(x[i], y[i])) return false;
  return true;
}

std::vector<std::string> lines_of(const std::string& path) {
  std::vector<std::string> out;
  std::ifstream in(path);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  std::string cell;
  std::stringstream ss(line);
  while (std::getline(ss, cell, ',')) out.push_back(cell);
  if (!line.empty() && line.back() == ',') out.push_back("");
  return out;
}

/// The column `name` of metrics.csv, for rows where it is set.
std::vector<double> csv_column(const std::string& path, const std::string& name) {
  auto lines = lines_of(path);
  std::vector<double> out;
  if (lines.empty()) return out;
  auto header = split(lines[0]);
  auto it = std::find(header.begin(), header.end(), name);
  if (it == header.end()) return out;
  const size_t col = static_cast<size_t>(it - header.begin());
  for (size_t i = 1; i < lines.size(); ++i) {
    auto cells = split(lines[i]);
    if (col < cells.size() && !cells[col].empty()) out.push_back(std::stod(cells[col]));
  }
  return out;
}

const std::vector<double> kScript = {0.5, 0.3, 0.4, 0.1, 0.6};

}  // namespace

TEST_CASE("ModelCheckpoint keeps the save_top_k best files by monitor", "[callbacks][model_checkpoint]") {
  struct Case {
    std::string mode;
    int64_t k;
    std::set<std::string> files;
    std::string best;
  };
  // 2 batches per epoch: epoch e ends at step 2(e+1). val_loss by epoch: 0.5 0.3 0.4 0.1 0.6.
  for (const auto& c :
       {Case{"min", 2, {"epoch=1-step=4.ckpt", "epoch=3-step=8.ckpt"}, "epoch=3-step=8.ckpt"},
        Case{"max", 2, {"epoch=0-step=2.ckpt", "epoch=4-step=10.ckpt"}, "epoch=4-step=10.ckpt"},
        Case{"min", 1, {"epoch=3-step=8.ckpt"}, "epoch=3-step=8.ckpt"},
        Case{"min", 3, {"epoch=1-step=4.ckpt", "epoch=2-step=6.ckpt", "epoch=3-step=8.ckpt"}, "epoch=3-step=8.ckpt"},
        Case{"min",
             -1,
             {"epoch=0-step=2.ckpt", "epoch=1-step=4.ckpt", "epoch=2-step=6.ckpt", "epoch=3-step=8.ckpt",
              "epoch=4-step=10.ckpt"},
             "epoch=3-step=8.ckpt"}}) {
    INFO("mode " << c.mode << " k " << c.k);
    const std::string root = temp_dir("cb-topk");
    ModelCheckpointOptions mo;
    mo.monitor = "val_loss";
    mo.mode = c.mode;
    mo.save_top_k = c.k;
    auto cb = std::make_shared<ModelCheckpoint>(mo);
    auto opts = short_options(root, 5, 2);
    opts.enable_checkpointing = true;
    Trainer t(opts, {cb});
    auto m = make_model<ScriptedVal>(0, [](int64_t e) { return kScript.at(e); });
    auto train = make_loader(), val = make_loader(16);
    t.fit(*m, train, &val);
    CHECK(listing(root + "/checkpoints") == c.files);
    CHECK(fs::path(cb->best_model_path()).filename() == c.best);
    // The best file holds the state of its step.
    const int64_t best_step = std::stoll(c.best.substr(c.best.find("step=") + 5));
    CHECK(load_checkpoint_file(cb->best_model_path()).global_step == best_step);
  }
}

TEST_CASE("ModelCheckpoint save_last writes last.ckpt and ckpt_path 'last' resumes from it",
          "[callbacks][model_checkpoint]") {
  const std::string root = temp_dir("cb-last");
  {
    ModelCheckpointOptions mo;
    mo.save_last = true;
    auto cb = std::make_shared<ModelCheckpoint>(mo);
    auto opts = short_options(root, 2, 2);
    opts.enable_checkpointing = true;
    Trainer t(opts, {cb});
    auto m = make_model(0);
    auto train = make_loader();
    t.fit(*m, train);
    CHECK(listing(root + "/checkpoints") == std::set<std::string>{"epoch=1-step=4.ckpt", "last.ckpt"});
    CHECK(cb->last_model_path() == (fs::path(root) / "checkpoints" / "last.ckpt").string());
    CHECK(load_checkpoint_file(root + "/checkpoints/last.ckpt").global_step == 4);
  }
  // Uninterrupted 4 epochs.
  auto full = make_model(0);
  {
    Trainer t(short_options(temp_dir("cb-last-full"), 4, 2));
    auto train = make_loader();
    t.fit(*full, train);
  }
  // Resume the first run to 4 epochs from "last", in a fresh model.
  ModelCheckpointOptions mo;
  mo.save_last = true;
  auto opts = short_options(root, 4, 2);
  opts.enable_checkpointing = true;
  Trainer t(opts, {std::make_shared<ModelCheckpoint>(mo)});
  auto resumed = make_model(12);
  auto train = make_loader();
  t.fit(*resumed, train, nullptr, "last");
  CHECK(t.global_step() == 8);
  CHECK(resumed->losses.size() == 4);
  CHECK(params_equal(*resumed, *full));
  CHECK(load_checkpoint_file(root + "/checkpoints/last.ckpt").global_step == 8);

  // The default checkpoint callback (enable_checkpointing) keeps last.ckpt too.
  const std::string root2 = temp_dir("cb-last-default");
  auto o2 = short_options(root2, 1, 2);
  o2.enable_checkpointing = true;
  Trainer t2(o2);
  auto m2 = make_model(0);
  t2.fit(*m2, train);
  CHECK(fs::exists(root2 + "/checkpoints/last.ckpt"));

  // "last" with nothing to resume from: fit starts from the beginning, as Lightning's does, and
  // trains exactly as without a ckpt_path; an evaluation has nothing to load.
  const std::string root3 = temp_dir("cb-last-none");
  Trainer t3(quiet_options(root3));
  auto m3 = make_model(0);
  t3.fit(*m3, train, nullptr, "last");
  Trainer t4(quiet_options(temp_dir("cb-last-none-ref")));
  auto m4 = make_model(0);
  t4.fit(*m4, train);
  CHECK(t3.global_step() == t4.global_step());
  CHECK(t3.global_step() > 0);
  CHECK(params_equal(*m3, *m4));
  Trainer t5(quiet_options(temp_dir("cb-last-none-eval")));
  CHECK_THROWS_AS(t5.validate(*m3, train, "last"), CheckpointError);
}

TEST_CASE("a run stopped by max_steps mid-epoch resumes from last.ckpt exactly", "[callbacks][model_checkpoint]") {
  auto full = make_model(0);
  {
    auto o = quiet_options(temp_dir("cb-last-mid"));
    o.max_epochs = -1;
    o.max_steps = 11;
    Trainer t(o);
    auto train = make_loader();
    t.fit(*full, train);
  }
  const std::string root = temp_dir("cb-last-mid");
  auto o = quiet_options(root);
  o.max_epochs = -1;
  o.enable_checkpointing = true;  // default ModelCheckpoint: save_last
  {
    o.max_steps = 3;
    Trainer t(o);
    auto part = make_model(0);
    auto train = make_loader();
    t.fit(*part, train);
  }
  REQUIRE(load_checkpoint_file(root + "/checkpoints/last.ckpt").global_step == 3);
  o.max_steps = 11;
  Trainer t(o);
  auto resumed = make_model(1);
  auto train = make_loader();
  t.fit(*resumed, train, nullptr, "last");
  CHECK(t.global_step() == 11);
  CHECK(resumed->losses == std::vector<double>(full->losses.begin() + 3, full->losses.end()));
  CHECK(params_equal(*resumed, *full));
}

TEST_CASE("ModelCheckpoint filenames follow '{epoch}-{step}'", "[callbacks][model_checkpoint]") {
  auto run = [](ModelCheckpointOptions mo, int64_t epochs) {
    const std::string root = temp_dir("cb-names");
    auto opts = short_options(root, epochs, 3);
    opts.enable_checkpointing = true;
    Trainer t(opts, {std::make_shared<ModelCheckpoint>(mo)});
    auto m = make_model(0);
    auto train = make_loader();
    t.fit(*m, train);
    return listing(root + "/checkpoints");
  };
  SECTION("default: the latest only") { CHECK(run({}, 2) == std::set<std::string>{"epoch=1-step=6.ckpt"}); }
  SECTION("save_top_k -1 keeps all") {
    ModelCheckpointOptions mo;
    mo.save_top_k = -1;
    CHECK(run(mo, 2) == std::set<std::string>{"epoch=0-step=3.ckpt", "epoch=1-step=6.ckpt"});
  }
  SECTION("a custom template and dirpath") {
    ModelCheckpointOptions mo;
    mo.save_top_k = -1;
    mo.filename = "model-{epoch}";
    CHECK(run(mo, 2) == std::set<std::string>{"model-epoch=0.ckpt", "model-epoch=1.ckpt"});
    const std::string elsewhere = temp_dir("cb-names-dir") + "/ck";
    mo.dirpath = elsewhere;
    run(mo, 1);
    CHECK(listing(elsewhere) == std::set<std::string>{"model-epoch=0.ckpt"});
  }
  SECTION("every_n_train_steps") {
    ModelCheckpointOptions mo;
    mo.save_top_k = -1;
    mo.every_n_train_steps = 2;
    CHECK(run(mo, 2) == std::set<std::string>{"epoch=0-step=2.ckpt", "epoch=1-step=4.ckpt", "epoch=1-step=6.ckpt"});
  }
  SECTION("invalid options") {
    ModelCheckpointOptions mo;
    mo.mode = "best";
    CHECK_THROWS_AS(ModelCheckpoint(mo), ConfigError);
    ModelCheckpointOptions k;
    k.save_top_k = 3;  // ranking needs a monitor
    CHECK_THROWS_AS(ModelCheckpoint(k), ConfigError);
  }
}

TEST_CASE("ModelCheckpoint applies format specs in the filename, as Lightning's", "[callbacks][model_checkpoint]") {
  // Lightning: "{epoch:02d}-{val_loss:.2f}" -> "epoch=00-val_loss=0.50.ckpt" (the header comment of
  // format_name says the same).
  const std::string root = temp_dir("cb-fmt");
  ModelCheckpointOptions mo;
  mo.monitor = "val_loss";
  mo.filename = "{epoch:02d}-{val_loss:.2f}";
  auto opts = short_options(root, 1, 2);
  opts.enable_checkpointing = true;
  Trainer t(opts, {std::make_shared<ModelCheckpoint>(mo)});
  auto m = make_model<ScriptedVal>(0, [](int64_t) { return 0.5; });
  auto train = make_loader(), val = make_loader(16);
  t.fit(*m, train, &val);
  CHECK(listing(root + "/checkpoints") == std::set<std::string>{"epoch=00-val_loss=0.50.ckpt"});
}

TEST_CASE("ModelCheckpoint refuses at construction a filename whose names no file system takes",
          "[callbacks][model_checkpoint]") {
  auto make = [](const std::string& filename, bool auto_insert = true) {
    ModelCheckpointOptions mo;
    mo.filename = filename;
    mo.auto_insert_metric_name = auto_insert;
    return ModelCheckpoint(mo);
  };
  // 234 bytes and ".ckpt" with the longest suffix a save adds fit in 255; one more does not.
  CHECK_NOTHROW(make(std::string(234, 'a')));
  CHECK_THAT(config_error([&] { make(std::string(235, 'a')); }),
             Contains("ModelCheckpoint.filename") && Contains("235 bytes"));
  // Fields count at their shortest: "epoch=0" is 7 bytes, "0" without the metric name.
  CHECK_THAT(config_error([&] { make("{epoch}" + std::string(228, 'a')); }), Contains("235 bytes"));
  CHECK_NOTHROW(make("{epoch}" + std::string(228, 'a'), false));
  // A folder part has the whole 255.
  CHECK_NOTHROW(make(std::string(255, 'd') + "/{epoch}"));
  CHECK_THAT(config_error([&] { make(std::string(256, 'd') + "/{epoch}"); }), Contains("a folder part"));
}

TEST_CASE("EarlyStopping stops after patience checks without improvement", "[callbacks][early_stopping]") {
  auto run = [](EarlyStoppingOptions eo, std::function<double(int64_t)> script, int64_t max_epochs = 10) {
    auto es = std::make_shared<EarlyStopping>(eo);
    Trainer t(short_options(temp_dir("cb-es"), max_epochs, 2), {es});
    auto m = make_model<ScriptedVal>(0, script);
    auto train = make_loader(), val = make_loader(16);
    t.fit(*m, train, &val);
    return std::make_tuple(m->epochs_started, es, t.should_stop);
  };
  SECTION("constant: one improving check, then patience") {
    EarlyStoppingOptions eo;
    eo.patience = 2;
    auto [epochs, es, stopped] = run(eo, [](int64_t) { return 1.0; });
    CHECK(epochs == 3);
    CHECK(stopped);
    CHECK(es->wait_count() == 2);
    CHECK(es->best_score() == 1.0);
    CHECK(es->stopped_epoch() == 2);
  }
  SECTION("improving, then flat") {
    EarlyStoppingOptions eo;
    eo.patience = 2;
    auto [epochs, es, stopped] = run(eo, [](int64_t e) { return e < 2 ? 1.0 - 0.1 * e : 0.9; });
    CHECK(epochs == 4);
    CHECK(es->best_score() == Approx(0.9));
  }
  SECTION("improvements smaller than min_delta do not count") {
    EarlyStoppingOptions eo;
    eo.patience = 2;
    eo.min_delta = 0.1;
    const std::vector<double> s = {1.0, 0.95, 0.92, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6, 0.55};
    auto [epochs, es, stopped] = run(eo, [s](int64_t e) { return s.at(e); });
    CHECK(epochs == 3);
    eo.min_delta = 0.0;
    auto [epochs2, es2, stopped2] = run(eo, [s](int64_t e) { return s.at(e); });
    CHECK(epochs2 == 10);
    CHECK_FALSE(stopped2);
  }
  SECTION("mode max") {
    EarlyStoppingOptions eo;
    eo.patience = 2;
    eo.mode = "max";
    auto [epochs, es, stopped] = run(eo, [](int64_t e) { return e < 2 ? 0.1 * (e + 1) : 0.2; });
    CHECK(epochs == 4);
    CHECK(es->best_score() == Approx(0.2));
  }
  SECTION("a non-finite value stops at once") {
    EarlyStoppingOptions eo;
    eo.patience = 5;
    auto [epochs, es, stopped] = run(eo, [](int64_t) { return std::nan(""); });
    CHECK(epochs == 1);
    CHECK(stopped);
  }
  SECTION("strict: a monitor never logged is a ConfigError naming it") {
    EarlyStoppingOptions eo;
    eo.monitor = "val_acc";
    try {
      run(eo, [](int64_t) { return 1.0; });
      FAIL("no error");
    } catch (const ConfigError& e) {
      CHECK_THAT(e.what(), Contains("val_acc"));
    }
    eo.strict = false;
    auto [epochs, es, stopped] = run(
        eo, [](int64_t) { return 1.0; }, 3);
    CHECK(epochs == 3);
    CHECK_FALSE(stopped);
  }
  SECTION("invalid options") {
    EarlyStoppingOptions eo;
    eo.mode = "up";
    CHECK_THROWS_AS(EarlyStopping(eo), ConfigError);
    EarlyStoppingOptions p;
    p.patience = -1;
    CHECK_THROWS_AS(EarlyStopping(p), ConfigError);
  }
}

TEST_CASE("EarlyStopping state round-trips, directly and through a checkpoint", "[callbacks][early_stopping]") {
  SECTION("state_dict / load_state_dict") {
    EarlyStoppingOptions eo;
    EarlyStopping fresh(eo);
    EarlyStopping copy(eo);
    copy.load_state_dict(YAML::Load(YAML::Dump(fresh.state_dict())));
    CHECK(std::isinf(copy.best_score()));
    CHECK(copy.best_score() > 0);
    CHECK(copy.wait_count() == 0);
    CHECK(copy.stopped_epoch() == -1);
  }
  SECTION("resume continues the count") {
    const std::string root = temp_dir("cb-es-state");
    EarlyStoppingOptions eo;
    eo.patience = 5;
    auto es = std::make_shared<EarlyStopping>(eo);
    {
      Trainer t(short_options(root, 3, 2), {es});
      auto m = make_model<ScriptedVal>(0, [](int64_t) { return 1.0; });
      auto train = make_loader(), val = make_loader(16);
      t.fit(*m, train, &val);
      REQUIRE(es->wait_count() == 2);
      t.save_checkpoint(root + "/es.ckpt");
    }
    // Directly.
    EarlyStopping copy(eo);
    copy.load_state_dict(YAML::Load(YAML::Dump(es->state_dict())));
    CHECK(copy.wait_count() == 2);
    CHECK(copy.best_score() == 1.0);
    CHECK(copy.stopped_epoch() == -1);

    // Through the checkpoint: 3 more flat checks reach patience 5.
    auto es2 = std::make_shared<EarlyStopping>(eo);
    Trainer t(short_options(root, 20, 2), {es2});
    auto m = make_model<ScriptedVal>(0, [](int64_t) { return 1.0; });
    auto train = make_loader(), val = make_loader(16);
    t.fit(*m, train, &val, root + "/es.ckpt");
    CHECK(m->epochs_started == 3);
    CHECK(es2->wait_count() == 5);
    CHECK(es2->stopped_epoch() == 5);
  }
}

namespace {
class TwoGroups : public BoringModel {
 public:
  Optimizers configure_optimizers() override {
    std::vector<torch::Tensor> body, top;
    for (auto& b : blocks)
      for (auto& p : b->parameters()) body.push_back(p);
    for (auto& p : head->parameters()) top.push_back(p);
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(body, std::make_unique<torch::optim::SGDOptions>(0.1));
    groups.emplace_back(top, std::make_unique<torch::optim::SGDOptions>(0.01));
    OptimizerConfig c;
    c.optimizer = std::make_shared<torch::optim::SGD>(groups, torch::optim::SGDOptions(0.1));
    return c;
  }
};
class StepDecay : public BoringModel {
 public:
  Optimizers configure_optimizers() override {
    OptimizerConfig c;
    auto opt = std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1));
    c.optimizer = opt;
    c.lr_scheduler = std::make_shared<StepLR>(*opt, 2, 0.5);
    c.interval = "step";
    return c;
  }
};
}  // namespace

TEST_CASE("LearningRateMonitor logs lr-<Optimizer>", "[callbacks][lr_monitor]") {
  SECTION("SGD, every step, following the scheduler") {
    auto opts = short_options(temp_dir("cb-lrm"), 1, 4);
    opts.log_every_n_steps = 1;
    Trainer t(opts, {std::make_shared<LearningRateMonitor>()});
    auto m = make_model<StepDecay>(0);
    auto train = make_loader();
    t.fit(*m, train);
    REQUIRE(t.callback_metrics().count("lr-SGD"));
    CHECK(t.callback_metrics().at("lr-SGD") == Approx(0.05));
    auto lrs = csv_column(t.log_dir() + "/metrics.csv", "lr-SGD");
    REQUIRE(lrs.size() == 4);
    const std::vector<double> expected = {0.1, 0.1, 0.05, 0.05};
    for (size_t i = 0; i < 4; ++i) CHECK(lrs[i] == Approx(expected[i]));
  }
  SECTION("Adam") {
    Trainer t(short_options(temp_dir("cb-lrm"), 1, 2), {std::make_shared<LearningRateMonitor>()});
    BoringOptions bo;
    bo.adam = true;
    bo.lr = 0.003;
    auto m = make_model(0, bo);
    auto train = make_loader();
    t.fit(*m, train);
    REQUIRE(t.callback_metrics().count("lr-Adam"));
    CHECK(t.callback_metrics().at("lr-Adam") == Approx(0.003));
    CHECK(t.callback_metrics().count("lr-SGD") == 0);
  }
  SECTION("param groups") {
    Trainer t(short_options(temp_dir("cb-lrm"), 1, 2), {std::make_shared<LearningRateMonitor>("epoch")});
    auto m = make_model<TwoGroups>(0);
    auto train = make_loader();
    t.fit(*m, train);
    REQUIRE(t.callback_metrics().count("lr-SGD/pg1"));
    REQUIRE(t.callback_metrics().count("lr-SGD/pg2"));
    CHECK(t.callback_metrics().at("lr-SGD/pg1") == Approx(0.1));
    CHECK(t.callback_metrics().at("lr-SGD/pg2") == Approx(0.01));
  }
  CHECK_THROWS_AS(LearningRateMonitor("batch"), ConfigError);
}

TEST_CASE("ModelSummary lists the submodules and parameter counts", "[callbacks][model_summary]") {
  BoringOptions small;
  small.dim = 4;
  small.hidden = 4;
  auto m = make_model(0, small);  // blocks: 4*4+4 = 20 each, head: 4*2+2 = 10; total 50
  auto text = ModelSummary::summarize(*m, 1);
  INFO(text);
  std::istringstream is(text);
  std::vector<std::string> lines;
  for (std::string l; std::getline(is, l);) lines.push_back(l);
  auto line_with = [&](const std::string& s) -> std::string {
    for (auto& l : lines)
      if (l.find(s) != std::string::npos) return l;
    return "";
  };
  CHECK_THAT(line_with("block0"), Contains("Block") && Contains(" 20"));
  CHECK_THAT(line_with("block1"), Contains("Block") && Contains(" 20"));
  CHECK_THAT(line_with("head"), Contains("Linear") && Contains(" 10"));
  CHECK(line_with("block0.linear").empty());  // deeper than max_depth 1
  CHECK_THAT(line_with("Total params"), Contains("50"));
  CHECK_THAT(line_with("Trainable params"), Contains("50"));
  CHECK_THAT(line_with("Non-trainable params"), Contains("0"));

  auto deep = ModelSummary::summarize(*m, 2);
  CHECK_THAT(deep, Contains("block0.linear"));

  // Frozen parameters are counted as non-trainable.
  for (auto& p : m->head->parameters()) p.set_requires_grad(false);
  auto frozen = ModelSummary::summarize(*m, 1);
  std::istringstream fs2(frozen);
  std::string trainable, non_trainable;
  for (std::string l; std::getline(fs2, l);) {
    if (l.find("Non-trainable params") != std::string::npos)
      non_trainable = l;
    else if (l.find("Trainable params") != std::string::npos)
      trainable = l;
  }
  CHECK_THAT(trainable, Contains("40"));
  CHECK_THAT(non_trainable, Contains("10"));

  // Lightning's human-readable counts: the default BoringModel has 2178 parameters.
  auto big = make_model(0);
  int64_t total = 0;
  for (auto& p : big->parameters()) total += p.numel();
  REQUIRE(total == 2178);
  CHECK_THAT(ModelSummary::summarize(*big, 1), Contains("2.2 K"));

  // A tensor under two names (tied embeddings) counts once in the totals, as in Lightning's.
  struct Holder : torch::nn::Module {};
  struct Tied : torch::nn::Module {
    Tied() {
      auto w = register_parameter("embed", torch::zeros({100, 4}));
      register_module("head", std::make_shared<Holder>())->register_parameter("weight", w);
    }
  };
  const std::string tied = ModelSummary::summarize(Tied(), 1);
  INFO(tied);
  CHECK_THAT(tied, Contains("400       Total params") && Contains("0.002     Total estimated model params size") &&
                       Contains("Holder |    400"));
}

TEST_CASE("CSVLogger: sorted header, rewritten when a key appears, new versions", "[callbacks][loggers][csv]") {
  const std::string root = temp_dir("csv");
  CSVLogger log(root);
  CHECK(log.version() == 0);
  CHECK(log.log_dir() == (fs::path(root) / "lightning_logs" / "version_0").string());
  const std::string path = log.log_dir() + "/metrics.csv";

  log.log_metrics({{"b_loss", 1.5}, {"a_acc", 0.25}}, 0);
  log.flush();
  auto lines = lines_of(path);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == "a_acc,b_loss,step");
  CHECK(lines[1] == "0.25,1.5,0");

  log.log_metrics({{"a_acc", 0.5}}, 1);
  log.flush();
  lines = lines_of(path);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] == "a_acc,b_loss,step");
  CHECK(lines[2] == "0.5,,1");

  // A new key: the whole file is rewritten with the new header; old rows get empty cells.
  log.log_metrics({{"c_new", 7.0}, {"epoch", 2.0}}, 2);
  log.flush();
  lines = lines_of(path);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == "a_acc,b_loss,c_new,epoch,step");
  CHECK(lines[1] == "0.25,1.5,,,0");
  CHECK(lines[2] == "0.5,,,,1");
  CHECK(lines[3] == ",,7,2,2");

  // Flushing again writes nothing twice.
  log.flush();
  CHECK(lines_of(path).size() == 4);

  // A second logger in the same root takes the next version; an explicit version is used as is.
  CSVLogger second(root);
  CHECK(second.version() == 1);
  CHECK(fs::is_directory(root + "/lightning_logs/version_1"));
  CSVLogger third(root);
  CHECK(third.version() == 2);
  CSVLogger pinned(root, "lightning_logs", 7);
  CHECK(pinned.version() == 7);
  CSVLogger after_gap(root);
  CHECK(after_gap.version() == 8);
  CSVLogger other_name(root, "other");
  CHECK(other_name.version() == 0);

  log.log_hyperparams(YAML::Load("lr: 0.1\nlayers: [4, 4]\n"));
  auto hp = YAML::LoadFile(log.log_dir() + "/hparams.yaml");
  CHECK(hp["lr"].as<double>() == 0.1);
}

TEST_CASE("the Trainer's logger versions its runs", "[callbacks][loggers][csv]") {
  const std::string root = temp_dir("csv-trainer");
  auto train = make_loader();
  std::vector<std::string> dirs;
  for (int i = 0; i < 2; ++i) {
    auto opts = short_options(root, 1, 2);
    opts.log_every_n_steps = 1;
    Trainer t(opts);
    auto m = make_model(0);
    t.fit(*m, train);
    dirs.push_back(t.log_dir());
    auto losses = csv_column(t.log_dir() + "/metrics.csv", "train_loss");
    REQUIRE(losses.size() == 2);
    CHECK(losses[0] == Approx(m->losses[0]));
    CHECK(losses[1] == Approx(m->losses[1]));
  }
  CHECK(fs::path(dirs[0]).filename() == "version_0");
  CHECK(fs::path(dirs[1]).filename() == "version_1");
  CHECK(fs::exists(dirs[0] + "/hparams.yaml"));
  // logger: false writes nothing.
  auto opts = short_options(root, 1, 2);
  opts.logger = false;
  Trainer t(opts);
  auto m = make_model(0);
  t.fit(*m, train);
  CHECK(t.log_dir().empty());
  CHECK_FALSE(fs::exists(root + "/lightning_logs/version_2"));
}
