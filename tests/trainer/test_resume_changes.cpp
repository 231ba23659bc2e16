// Resuming with changed settings: the checkpoint's optimizer hyper-parameters win, with a warning
// naming both values; a mid-epoch position under another batch size or data set is refused; and
// ckpt_path="best" is the first ModelCheckpoint's best_model_path, as in Lightning.
#include <spdlog/sinks/ostream_sink.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <sstream>
#include <string>

#include "checkpoint/checkpoint_support.h"
#include "error_capture.h"
#include "trainer/trainer_support.h"
#include "volt/callbacks/on_exception_checkpoint.h"
#include "volt/checkpoint/checkpoint.h"
#include "volt/core/errors.h"

using namespace volt;
using namespace volt::testing;
using Catch::Matchers::Contains;

namespace {
/// The BoringModel with SGD(lr, weight_decay).
struct DecayModel : BoringModel {
  DecayModel(double lr, double weight_decay) : lr(lr), weight_decay(weight_decay) {}
  Optimizers configure_optimizers() override {
    OptimizerConfig c;
    c.optimizer =
        std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(lr).weight_decay(weight_decay));
    return c;
  }
  double lr, weight_decay;
};

/// The optimizer's lr and weight_decay when training (re)starts.
struct OptimizerProbe : Callback {
  std::string state_key() const override { return "OptimizerProbe"; }
  void on_train_start(Trainer& t, LightningModule&) override {
    auto& o = static_cast<torch::optim::SGDOptions&>(t.optimizer()->param_groups()[0].options());
    lr = o.lr();
    weight_decay = o.weight_decay();
  }
  double lr = -1, weight_decay = -1;
};

/// Trains 2 steps of an epoch of 8 batches (64 samples, batch_size 8) and returns last.ckpt: saved
/// in the middle of the epoch.
std::string mid_epoch_checkpoint(const std::string& root) {
  auto o = quiet_options(root);
  o.enable_checkpointing = true;
  o.max_steps = 2;
  Trainer t(o, {every_step_checkpoint()});
  auto m = make_model<DecayModel>(0, 0.1, 0.0);
  auto train = make_loader(64, 8);
  t.fit(*m, train);
  return root + "/checkpoints/last.ckpt";
}
}  // namespace

TEST_CASE("resume with another lr and weight_decay: the checkpoint's win, with a warning naming both",
          "[trainer][resume][refusals]") {
  const std::string root = temp_dir("resume-lr");
  const std::string ckpt = mid_epoch_checkpoint(root);
  auto o = quiet_options(root);
  o.max_steps = 3;
  auto probe = std::make_shared<OptimizerProbe>();
  Trainer t(o, {probe});
  auto m = make_model<DecayModel>(0, 0.5, 0.01);
  auto train = make_loader(64, 8);
  Logs logs;
  t.fit(*m, train, nullptr, ckpt);
  CHECK(probe->lr == 0.1);
  CHECK(probe->weight_decay == 0.0);
  CHECK_THAT(logs.text.str(), Contains("Resuming from " + ckpt) && Contains("win over this run's") &&
                                  Contains("lr: 0.1 (the checkpoint's, used) instead of 0.5 (this run's)") &&
                                  Contains("weight_decay: 0 (the checkpoint's, used) instead of 0.01 (this run's)"));

  // The same values: no warning.
  Logs quiet;
  Trainer same(o);
  auto m2 = make_model<DecayModel>(0, 0.1, 0.0);
  same.fit(*m2, train, nullptr, ckpt);
  CHECK_THAT(quiet.text.str(), !Contains("win over this run's"));
}

TEST_CASE("resume mid-epoch with another batch_size or number of samples is refused, naming both",
          "[trainer][resume][refusals]") {
  const std::string root = temp_dir("resume-batch");
  const std::string ckpt = mid_epoch_checkpoint(root);
  auto o = quiet_options(root);
  o.max_steps = 4;
  {
    Trainer t(o);
    auto m = make_model<DecayModel>(0, 0.1, 0.0);
    auto train = make_loader(64, 4);
    CHECK_THAT(checkpoint_error([&] { t.fit(*m, train, nullptr, ckpt); }),
               Contains(ckpt) && Contains("middle of epoch 0 (after 2 batches)") && Contains("batch_size 8") &&
                   Contains("batch_size 4"));
  }
  {
    Trainer t(o);
    auto m = make_model<DecayModel>(0, 0.1, 0.0);
    auto train = make_loader(48, 8);  // as another block_size would cut the text
    CHECK_THAT(checkpoint_error([&] { t.fit(*m, train, nullptr, ckpt); }),
               Contains("64 training samples") && Contains("has 48") && Contains("block_size"));
  }
  {
    // The same data and batch size resume.
    Trainer t(o);
    auto m = make_model<DecayModel>(0, 0.1, 0.0);
    auto train = make_loader(64, 8);
    t.fit(*m, train, nullptr, ckpt);
    CHECK(t.global_step() == 4);
  }
}

TEST_CASE("resume at an epoch's end with another batch_size is allowed (nothing to reinterpret)",
          "[trainer][resume][refusals]") {
  const std::string root = temp_dir("resume-epoch-end");
  auto o = quiet_options(root);
  o.enable_checkpointing = true;
  {
    Trainer t(o);
    auto m = make_model<DecayModel>(0, 0.1, 0.0);
    auto train = make_loader(64, 8);
    t.fit(*m, train);  // one epoch: last.ckpt at its end
  }
  o.max_epochs = 2;
  Trainer t(o);
  auto m = make_model<DecayModel>(0, 0.1, 0.0);
  auto train = make_loader(64, 4);
  t.fit(*m, train, nullptr, "last");
  CHECK(t.global_step() == 8 + 16);
}

TEST_CASE("ckpt_path='best' is the first ModelCheckpoint's best_model_path, and a clear error without one",
          "[trainer][resume][refusals]") {
  const std::string root = temp_dir("ckpt-best");
  auto o = quiet_options(root);
  o.enable_checkpointing = true;
  o.max_epochs = 3;
  ModelCheckpointOptions mo;
  mo.monitor = "val_loss";
  auto mc = std::make_shared<ModelCheckpoint>(mo);
  Trainer t(o, {mc});
  auto m = make_model(0);
  auto train = make_loader(32, 8);
  auto val = make_loader(16, 8);
  t.fit(*m, train, &val);
  const std::string best = mc->best_model_path();
  REQUIRE_FALSE(best.empty());
  Logs logs;
  const auto metrics = t.validate(*m, val, "best");
  CHECK(metrics.count("val_loss") == 1);
  CHECK_THAT(logs.text.str(), Contains("Restoring states from the checkpoint path at " + best));
  // As Lightning, validate / test restore no callback state: "best" stays the fit's best (the
  // checkpoint's own ModelCheckpoint state predates it).
  CHECK(mc->best_model_path() == best);
  t.test(*m, val, "best");
  CHECK(mc->best_model_path() == best);

  // A Trainer whose ModelCheckpoint saved nothing yet, and one with none at all.
  Trainer fresh(o, {std::make_shared<ModelCheckpoint>(mo)});
  CHECK_THAT(checkpoint_error([&] { fresh.test(*m, val, "best"); }),
             Contains("ckpt_path='best'") && Contains("best_model_path is empty") && Contains("Run fit first"));
  Trainer none(quiet_options(root));
  CHECK_THAT(checkpoint_error([&] { none.validate(*m, val, "best"); }),
             Contains("ckpt_path='best'") && Contains("has no ModelCheckpoint"));
}

TEST_CASE("resume mid-epoch with another shuffle or seed is refused: the skipped batches would be other samples",
          "[trainer][resume][refusals]") {
  const std::string root = temp_dir("resume-shuffle");
  const std::string ckpt = mid_epoch_checkpoint(root);  // shuffle off
  auto o = quiet_options(root);
  o.max_steps = 4;
  Trainer t(o);
  auto m = make_model<DecayModel>(0, 0.1, 0.0);
  auto shuffled = make_loader(64, 8, /*shuffle=*/true, /*seed=*/3);
  CHECK_THAT(checkpoint_error([&] { t.fit(*m, shuffled, nullptr, ckpt); }),
             Contains(ckpt) && Contains("with shuffle off") && Contains("has shuffle on (seed 3)"));
  // A shuffled run resumed with another seed.
  const std::string root2 = temp_dir("resume-seed");
  {
    auto o2 = quiet_options(root2);
    o2.enable_checkpointing = true;
    o2.max_steps = 2;
    Trainer first(o2, {every_step_checkpoint()});
    auto m2 = make_model<DecayModel>(0, 0.1, 0.0);
    auto train = make_loader(64, 8, true, 3);
    first.fit(*m2, train);
  }
  Trainer again(o);
  auto m3 = make_model<DecayModel>(0, 0.1, 0.0);
  auto other_seed = make_loader(64, 8, true, 4);
  CHECK_THAT(checkpoint_error([&] { again.fit(*m3, other_seed, nullptr, root2 + "/checkpoints/last.ckpt"); }),
             Contains("shuffle on (seed 3)") && Contains("shuffle on (seed 4)"));
}

namespace {
/// The global step of every validation (not the sanity check).
struct ValidationSteps : Callback {
  std::string state_key() const override { return "ValidationSteps"; }
  void on_validation_end(Trainer& t, LightningModule&) override {
    if (!t.sanity_checking()) steps.push_back(t.global_step());
  }
  std::vector<int64_t> steps;
};
}  // namespace

TEST_CASE("a checkpoint written before its batch's validation: the resumed fit runs that validation first",
          "[trainer][resume]") {
  // Validation every 2 batches; every_n_train_steps saves at each batch's end, before its validation.
  const std::string root = temp_dir("resume-val-pending");
  auto o = quiet_options(root);
  o.enable_checkpointing = true;
  o.max_steps = 6;
  o.val_check_interval = BatchLimit::count(2);
  auto val = make_loader(16, 8);
  auto whole_steps = std::make_shared<ValidationSteps>();
  auto whole = make_model(0);
  {
    Trainer t(o, {whole_steps, every_step_checkpoint()});
    auto train = make_loader(64, 8);
    t.fit(*whole, train, &val);
  }
  CHECK(whole_steps->steps == std::vector<int64_t>{2, 4, 6});
  const Checkpoint at2 = load_checkpoint_file(root + "/checkpoints/epoch=0-step=2.ckpt");
  CHECK(at2.meta["loops"]["validation_pending"].as<bool>());
  for (const int64_t max_steps : {int64_t{6}, int64_t{2}}) {
    INFO("max_steps " << max_steps);
    auto o2 = quiet_options(temp_dir("resume-val-pending-2"));
    o2.max_steps = max_steps;
    o2.val_check_interval = BatchLimit::count(2);
    auto steps = std::make_shared<ValidationSteps>();
    auto m = make_model(1);
    Trainer t(o2, {steps});
    auto train = make_loader(64, 8);
    t.fit(*m, train, &val, root + "/checkpoints/epoch=0-step=2.ckpt");
    REQUIRE_FALSE(steps->steps.empty());
    CHECK(steps->steps.front() == 2);  // the validation due at step 2 (at max_steps 2: the only work left)
    CHECK(t.callback_metrics().count("val_loss") == 1);
    if (max_steps == 6) {
      CHECK(steps->steps == whole_steps->steps);
      CHECK(all_equal(snapshot(*m), snapshot(*whole)));
    }
  }
}

TEST_CASE("gradient accumulation: a stop signal waits for the window's step, and a checkpoint inside a window says so",
          "[trainer][resume][accumulation][signals]") {
  SECTION("SIGTERM inside a window stops at the next window's first batch, after the step") {
    struct RaiseAtBatch : Callback {
      std::string state_key() const override { return "RaiseAtBatch"; }
      void on_train_batch_end(Trainer&, LightningModule&, const torch::Tensor&, const Batch&, int64_t i) override {
        if (i == 2) std::raise(SIGTERM);  // after micro-batch 2 of the window {2, 3}
      }
    };
    const std::string root = temp_dir("accum-sigterm");
    auto o = quiet_options(root);
    o.accumulate_grad_batches = 2;
    o.max_steps = 20;
    OnExceptionCheckpointOptions eo;
    eo.dirpath = root + "/exc";
    Trainer t(o, {std::make_shared<RaiseAtBatch>(), std::make_shared<OnExceptionCheckpoint>(eo)});
    auto m = make_model(0);
    auto train = make_loader(64, 8);
    Logs logs;
    CHECK_THROWS_WITH(t.fit(*m, train), Contains("stopped by SIGTERM") && Contains("batch 4"));
    CHECK(t.global_step() == 2);  // the window {2, 3} stepped
    CHECK_THAT(logs.text.str(), Contains("stopping after this gradient accumulation window's optimizer step"));
    const Checkpoint c = load_checkpoint_file(root + "/exc/on_exception.ckpt");
    CHECK(c.meta["loops"]["batch_in_epoch"].as<int64_t>() == 4);
    CHECK_FALSE(c.meta["loops"]["accumulated_batches"]);
  }
  SECTION("a validation inside a window: its checkpoint records the micro-batches, and a resume warns") {
    const std::string root = temp_dir("accum-val");
    auto o = quiet_options(root);
    o.accumulate_grad_batches = 2;
    o.max_steps = 3;
    o.enable_checkpointing = true;
    o.val_check_interval = BatchLimit::count(3);  // after batch 2: the window {2, 3} is open
    ModelCheckpointOptions mo;
    mo.save_top_k = -1;
    auto val = make_loader(16, 8);
    {
      Trainer t(o, {std::make_shared<ModelCheckpoint>(mo)});
      auto m = make_model(0);
      auto train = make_loader(64, 8);
      t.fit(*m, train, &val);
    }
    const std::string ckpt = root + "/checkpoints/epoch=0-step=1.ckpt";
    const Checkpoint c = load_checkpoint_file(ckpt);
    CHECK(c.meta["loops"]["batch_in_epoch"].as<int64_t>() == 3);
    CHECK(c.meta["loops"]["accumulated_batches"].as<int64_t>() == 1);
    auto o2 = quiet_options(temp_dir("accum-val-2"));
    o2.accumulate_grad_batches = 2;
    o2.max_steps = 3;
    Trainer t(o2);
    auto m = make_model(0);
    auto train = make_loader(64, 8);
    Logs logs;
    t.fit(*m, train, &val, ckpt);
    CHECK_THAT(logs.text.str(), Contains("inside a gradient accumulation window") &&
                                    Contains("its 1 micro-batch(es) since the last optimizer step"));
  }
}

namespace {
/// A BoringModel whose loss draws from the default generator (as dropout does).
struct NoisyModel : BoringModel {
  torch::Tensor training_step(const Batch& batch, int64_t) override {
    auto out = forward(batch[0]);
    return torch::mse_loss(out + 0.1 * torch::randn_like(out), torch::ones_like(out));
  }
};
}  // namespace

TEST_CASE(
    "a stop signal's OnExceptionCheckpoint resumes exactly with random draws in the step, and should_stop waits "
    "for the accumulation window",
    "[trainer][resume][accumulation][signals]") {
  for (const int64_t accum : {int64_t{1}, int64_t{2}}) {
    DYNAMIC_SECTION("accumulate_grad_batches " << accum) {
      auto options = [&](const std::string& root) {
        auto o = quiet_options(root);
        o.max_steps = 6;
        o.accumulate_grad_batches = accum;
        return o;
      };
      auto whole = make_model<NoisyModel>(0);
      {
        Trainer t(options(temp_dir("noisy-whole")));
        auto train = make_loader(64, 4);
        t.fit(*whole, train);
      }
      // SIGTERM after batch 2: the stop comes at batch 3 (accumulate 1) or 4 (the window {2, 3} first).
      struct RaiseAfter2 : Callback {
        std::string state_key() const override { return "RaiseAfter2"; }
        void on_train_batch_end(Trainer&, LightningModule&, const torch::Tensor&, const Batch&, int64_t i) override {
          if (i == 2) std::raise(SIGTERM);
        }
      };
      const std::string root = temp_dir("noisy-stop");
      OnExceptionCheckpointOptions eo;
      eo.dirpath = root + "/exc";
      {
        Trainer t(options(root), {std::make_shared<RaiseAfter2>(), std::make_shared<OnExceptionCheckpoint>(eo)});
        auto m = make_model<NoisyModel>(0);
        auto train = make_loader(64, 4);
        CHECK_THROWS_WITH(t.fit(*m, train), Contains("stopped by SIGTERM"));
      }
      CHECK(load_checkpoint_file(root + "/exc/on_exception.ckpt").meta["loops"]["batch_in_epoch"].as<int64_t>() ==
            (accum == 1 ? 3 : 4));
      auto resumed = make_model<NoisyModel>(5);
      {
        Trainer t(options(temp_dir("noisy-resumed")));
        auto train = make_loader(64, 4);
        t.fit(*resumed, train, nullptr, root + "/exc/on_exception.ckpt");
      }
      CHECK(all_equal(snapshot(*resumed), snapshot(*whole)));

      // should_stop inside a window (a Timer's, EarlyStopping's) ends fit after the window's step.
      struct StopAfter2 : Callback {
        std::string state_key() const override { return "StopAfter2"; }
        void on_train_batch_end(Trainer& t, LightningModule&, const torch::Tensor&, const Batch&, int64_t i) override {
          if (i == 2) t.should_stop = true;
        }
      };
      const std::string root2 = temp_dir("accum-should-stop");
      auto o2 = options(root2);
      o2.enable_checkpointing = true;
      Trainer t(o2, {std::make_shared<StopAfter2>()});
      auto m = make_model<NoisyModel>(0);
      auto train = make_loader(64, 4);
      t.fit(*m, train);
      const Checkpoint last = load_checkpoint_file(root2 + "/checkpoints/last.ckpt");
      CHECK(last.meta["loops"]["batch_in_epoch"].as<int64_t>() == (accum == 1 ? 3 : 4));
      CHECK_FALSE(last.meta["loops"]["accumulated_batches"]);
      CHECK(t.global_step() == (accum == 1 ? 3 : 2));
    }
  }
}
