// Validation inside fit (intervals, sanity check) and the validate/test entry points.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <memory>
#include <vector>

#include "trainer/trainer_support.h"
#include "volt/core/errors.h"

using namespace volt;
using namespace volt::testing;

namespace {

/// Counts validation runs (global step at each) and validation steps.
class ValCounter : public BoringModel {
 public:
  std::vector<int64_t> val_at_step;
  std::vector<int64_t> val_at_epoch;
  int64_t val_steps = 0;
  int64_t sanity_steps = 0;
  bool log_in_sanity = false;
  void on_validation_epoch_start() override {
    if (trainer()->sanity_checking()) return;
    val_at_step.push_back(trainer()->global_step());
    val_at_epoch.push_back(trainer()->current_epoch());
  }
  void validation_step(const Batch& b, int64_t i) override {
    if (trainer()->sanity_checking()) {
      ++sanity_steps;
      if (log_in_sanity) log("sanity_marker", 123.0);
    } else {
      ++val_steps;
    }
    BoringModel::validation_step(b, i);
  }
};

/// A module with only the required hooks: no validation_step, no test_step.
class TrainOnly : public LightningModule {
 public:
  TrainOnly() : LightningModule("TrainOnly") { fc = register_module("fc", torch::nn::Linear(32, 1)); }
  torch::Tensor training_step(const Batch& b, int64_t) override { return fc->forward(b[0]).pow(2).mean(); }
  Optimizers configure_optimizers() override {
    OptimizerConfig c;
    c.optimizer = std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1));
    return c;
  }
  torch::nn::Linear fc{nullptr};
};

}  // namespace

TEST_CASE("validation runs at val_check_interval and check_val_every_n_epoch", "[trainer][validation]") {
  auto run = [](auto configure, int64_t max_epochs) {
    auto m = make_model<ValCounter>(0);
    auto opts = quiet_options(temp_dir("trainer-val"));
    opts.max_epochs = max_epochs;
    configure(opts);
    Trainer t(opts);
    auto train = make_loader(64, 8);  // 8 batches
    auto val = make_loader(32, 8);    // 4 batches
    t.fit(*m, train, &val);
    return m;
  };
  SECTION("default: once at the end of every epoch") {
    auto m = run([](TrainerOptions&) {}, 2);
    CHECK(m->val_at_step == std::vector<int64_t>{8, 16});
    CHECK(m->val_steps == 8);
  }
  SECTION("a fraction of the epoch") {
    auto m = run([](TrainerOptions& o) { o.val_check_interval = BatchLimit::fraction(0.25); }, 1);
    CHECK(m->val_at_step == std::vector<int64_t>{2, 4, 6, 8});
  }
  SECTION("a batch count") {
    auto m = run([](TrainerOptions& o) { o.val_check_interval = BatchLimit::count(3); }, 2);
    CHECK(m->val_at_step == std::vector<int64_t>{3, 6, 11, 14});
  }
  SECTION("every second epoch") {
    auto m = run([](TrainerOptions& o) { o.check_val_every_n_epoch = 2; }, 4);
    CHECK(m->val_at_epoch == std::vector<int64_t>{1, 3});
    CHECK(m->val_at_step == std::vector<int64_t>{16, 32});
  }
  SECTION("limit_val_batches") {
    auto m = run([](TrainerOptions& o) { o.limit_val_batches = BatchLimit::count(2); }, 1);
    CHECK(m->val_steps == 2);
    auto f = run([](TrainerOptions& o) { o.limit_val_batches = BatchLimit::fraction(0.75); }, 1);
    CHECK(f->val_steps == 3);
    auto none = run([](TrainerOptions& o) { o.limit_val_batches = BatchLimit::count(0); }, 1);
    CHECK(none->val_at_step.empty());
  }
}

TEST_CASE("a batch-count val_check_interval still honours check_val_every_n_epoch", "[trainer][validation]") {
  // Lightning (_should_check_val_epoch): validation only runs in epochs where
  // (epoch + 1) % check_val_every_n_epoch == 0, whatever val_check_interval is.
  auto m = make_model<ValCounter>(0);
  auto opts = quiet_options(temp_dir("trainer-val"));
  opts.max_epochs = 2;
  opts.val_check_interval = BatchLimit::count(4);
  opts.check_val_every_n_epoch = 2;
  Trainer t(opts);
  auto train = make_loader(64, 8);
  auto val = make_loader(32, 8);
  t.fit(*m, train, &val);
  CHECK(m->val_at_epoch == std::vector<int64_t>{1, 1});
  CHECK(m->val_at_step == std::vector<int64_t>{12, 16});
}

TEST_CASE("sanity validation steps run but log nothing", "[trainer][validation]") {
  auto m = make_model<ValCounter>(0);
  m->log_in_sanity = true;
  auto opts = quiet_options(temp_dir("trainer-sanity"));
  opts.num_sanity_val_steps = 2;
  opts.limit_train_batches = BatchLimit::count(2);
  opts.log_every_n_steps = 1;
  Trainer t(opts);
  auto train = make_loader(64, 8);
  auto val = make_loader(32, 8);  // 4 batches
  t.fit(*m, train, &val);
  CHECK(m->sanity_steps == 2);
  CHECK(m->val_steps == 4);
  CHECK(m->val_at_step == std::vector<int64_t>{2});  // the sanity check is not a validation epoch
  CHECK(t.callback_metrics().count("sanity_marker") == 0);

  // val_loss is the mean over the 4 real validation batches only.
  double expected = 0;
  {
    torch::NoGradGuard ng;
    m->eval();
    for (int64_t i = 0; i < 4; ++i) {
      auto out = m->forward(val.batch(i)[0]);
      expected += torch::mse_loss(out, torch::ones_like(out)).item<double>() / 4.0;
    }
  }
  REQUIRE(t.callback_metrics().count("val_loss"));
  CHECK(t.callback_metrics().at("val_loss") == Approx(expected).epsilon(1e-6));

  auto csv = read_csv(t.log_dir() + "/metrics.csv");
  CHECK(csv.col("sanity_marker") == -1);
  CHECK(csv.col("val_loss") >= 0);
  CHECK(csv.col("train_loss") >= 0);

  // -1: the whole validation set.
  auto all = make_model<ValCounter>(0);
  opts.num_sanity_val_steps = -1;
  opts.default_root_dir = temp_dir("trainer-sanity");
  Trainer t2(opts);
  t2.fit(*all, train, &val);
  CHECK(all->sanity_steps == 4);
  // Sanity steps do not change the model (same result as without them).
  auto none = make_model<ValCounter>(0);
  opts.num_sanity_val_steps = 0;
  opts.default_root_dir = temp_dir("trainer-sanity");
  Trainer t3(opts);
  t3.fit(*none, train, &val);
  CHECK(none->sanity_steps == 0);
  CHECK(all_equal(snapshot(*all), snapshot(*none)));
}

TEST_CASE("a val loader without validation_step is a ConfigError", "[trainer][validation]") {
  for (int64_t sanity : {0, 2}) {
    torch::manual_seed(0);
    auto m = std::make_shared<TrainOnly>();
    auto opts = quiet_options(temp_dir("trainer-noval"));
    opts.num_sanity_val_steps = sanity;
    opts.limit_train_batches = BatchLimit::count(2);
    Trainer t(opts);
    auto dl = make_loader();
    auto val = make_loader(16, 8);
    try {
      t.fit(*m, dl, &val);
      FAIL("fit did not throw");
    } catch (const ConfigError& e) {
      CHECK_THAT(e.what(), Catch::Matchers::Contains("validation_step"));
    }
  }
  // Without a val loader it trains fine; validate/test without the hooks fail the same way.
  auto m = std::make_shared<TrainOnly>();
  auto opts = quiet_options(temp_dir("trainer-noval"));
  Trainer t(opts);
  auto dl = make_loader();
  CHECK_NOTHROW(t.fit(*m, dl));
  Trainer t2(quiet_options(temp_dir("trainer-noval")));
  try {
    t2.test(*m, dl);
    FAIL("test did not throw");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Catch::Matchers::Contains("test_step"));
  }
  Trainer t3(quiet_options(temp_dir("trainer-noval")));
  CHECK_THROWS_AS(t3.validate(*m, dl), ConfigError);
}

TEST_CASE("validate and test return the epoch metrics", "[trainer][validation]") {
  auto m = make_model(0);
  auto dl = make_loader(32, 8);
  double expected = 0;
  {
    torch::NoGradGuard ng;
    for (int64_t i = 0; i < 4; ++i) {
      auto out = m->forward(dl.batch(i)[0]);
      expected += torch::mse_loss(out, torch::ones_like(out)).item<double>() / 4.0;
    }
  }
  Trainer t(quiet_options(temp_dir("trainer-eval")));
  auto v = t.validate(*m, dl);
  REQUIRE(v.count("val_loss"));
  CHECK(v.at("val_loss") == Approx(expected).epsilon(1e-6));
  auto r = t.test(*m, dl);
  REQUIRE(r.count("test_loss"));
  CHECK(r.at("test_loss") == Approx(expected).epsilon(1e-6));
}
