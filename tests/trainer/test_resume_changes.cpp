// Resuming with changed settings: the checkpoint's optimizer hyper-parameters win, with a warning
// naming both values; a mid-epoch position under another batch size or data set is refused; and
// ckpt_path="best" is the first ModelCheckpoint's best_model_path, as in Lightning.
#include <spdlog/sinks/ostream_sink.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <sstream>
#include <string>

#include "checkpoint/checkpoint_support.h"
#include "error_capture.h"
#include "trainer/trainer_support.h"
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
