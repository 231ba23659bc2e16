// Trainer options of the fit loop: min_epochs / min_steps against should_stop, inference_mode
// during evaluation and predict, reload_dataloaders_every_n_epochs, and a callback changing
// accumulate_grad_batches between epochs.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "trainer/trainer_support.h"
#include "volt/data/data_module.h"

using namespace volt;
using namespace volt::testing;

namespace {
/// Sets should_stop after the first optimizer step, as EarlyStopping would.
class StopAtOnce : public Callback {
 public:
  std::string state_key() const override { return "StopAtOnce"; }
  void on_train_batch_end(Trainer& t, LightningModule&, const torch::Tensor&, const Batch&, int64_t) override {
    t.should_stop = true;
  }
};
}  // namespace

TEST_CASE("should_stop waits for min_epochs and min_steps", "[trainer][fit_options]") {
  auto run = [](std::optional<int64_t> min_epochs, std::optional<int64_t> min_steps) {
    auto m = make_model(0);
    auto opts = quiet_options(temp_dir("fit-options-min"));
    opts.max_epochs = 10;
    opts.min_epochs = min_epochs;
    opts.min_steps = min_steps;
    Trainer t(opts, {std::make_shared<StopAtOnce>()});
    auto dl = make_loader();  // 8 batches an epoch
    t.fit(*m, dl);
    return std::make_pair(t.global_step(), m->losses.size());
  };
  CHECK(run(std::nullopt, std::nullopt).first == 1);  // no minimum: stops after the first step
  // min_epochs 3: the first three epochs run whole.
  CHECK(run(3, std::nullopt).first == 24);
  // min_steps 10: stops in the second epoch, at the step that meets it.
  CHECK(run(std::nullopt, 10).first == 10);
  CHECK(run(2, 20).first == 20);
}

namespace {
/// Records the autograd state its evaluation and predict steps ran under.
class ModeProbe : public BoringModel {
 public:
  std::vector<std::pair<bool, bool>> seen;  // (InferenceMode, GradMode)
  void validation_step(const Batch& b, int64_t i) override {
    seen.emplace_back(c10::InferenceMode::is_enabled(), torch::GradMode::is_enabled());
    BoringModel::validation_step(b, i);
  }
  void test_step(const Batch& b, int64_t i) override {
    seen.emplace_back(c10::InferenceMode::is_enabled(), torch::GradMode::is_enabled());
    BoringModel::test_step(b, i);
  }
  Batch predict_step(const Batch& b, int64_t) override {
    seen.emplace_back(c10::InferenceMode::is_enabled(), torch::GradMode::is_enabled());
    return {forward(b[0])};
  }
};
}  // namespace

TEST_CASE("inference_mode picks InferenceMode or NoGradGuard for evaluation and predict", "[trainer][fit_options]") {
  for (bool on : {true, false}) {
    auto m = make_model<ModeProbe>(0);
    auto opts = quiet_options(temp_dir("fit-options-inference"));
    opts.inference_mode = on;
    opts.limit_train_batches = BatchLimit::count(2);
    opts.limit_val_batches = BatchLimit::count(1);
    opts.limit_test_batches = BatchLimit::count(1);
    opts.limit_predict_batches = BatchLimit::count(1);
    opts.max_epochs = 2;  // training after a validation under InferenceMode still works
    Trainer t(opts);
    auto dl = make_loader();
    auto val = make_loader(16, 8);
    t.fit(*m, dl, &val);
    t.test(*m, val);
    auto out = t.predict(*m, val);
    REQUIRE(m->seen.size() == 4);
    for (const auto& [inference, grad] : m->seen) {
      CHECK(inference == on);
      CHECK_FALSE(grad);
    }
    CHECK(m->losses.size() == 4);
    REQUIRE(out.size() == 1);
    CHECK(out[0][0].is_inference() == on);
  }
}

namespace {
class CountingData : public LightningDataModule {
 public:
  int train_calls = 0, val_calls = 0;
  std::shared_ptr<DataLoader> train_dataloader() override {
    ++train_calls;
    // Each reload gets a dataset of its own, so the loop must count its batches again.
    return std::make_shared<DataLoader>(make_loader(8 * (train_calls + 1), 8));
  }
  DataLoaders val_dataloader() override {
    ++val_calls;
    return {std::make_shared<DataLoader>(make_loader(8, 8))};
  }
};
}  // namespace

TEST_CASE("reload_dataloaders_every_n_epochs makes the data module's loaders again", "[trainer][fit_options]") {
  auto m = make_model(0);
  auto opts = quiet_options(temp_dir("fit-options-reload"));
  opts.max_epochs = 5;
  opts.reload_dataloaders_every_n_epochs = 2;
  CountingData data;
  Trainer t(opts);
  t.fit(*m, data);
  // Loaded at epoch 0, again at epochs 2 and 4 (Lightning's schedule).
  CHECK(data.train_calls == 3);
  CHECK(data.val_calls == 3);
  // 2 batches in epochs 0-1, 3 in epochs 2-3, 4 in epoch 4.
  CHECK(t.global_step() == 2 + 2 + 3 + 3 + 4);

  CountingData once;
  opts.reload_dataloaders_every_n_epochs = 0;
  opts.default_root_dir = temp_dir("fit-options-reload-off");
  Trainer t2(opts);
  t2.fit(*make_model(0), once);
  CHECK(once.train_calls == 1);
  CHECK(t2.global_step() == 5 * 2);
}

namespace {
/// Doubles accumulate_grad_batches from epoch 1 on, as a GradientAccumulationScheduler({1: 2}).
class Accumulation : public Callback {
 public:
  std::string state_key() const override { return "Accumulation"; }
  void on_train_epoch_start(Trainer& t, LightningModule&) override {
    t.accumulate_grad_batches = t.current_epoch() >= 1 ? 2 : 1;
  }
};
}  // namespace

TEST_CASE("a callback may change accumulate_grad_batches at the start of an epoch", "[trainer][fit_options]") {
  auto m = make_model(0);
  auto opts = quiet_options(temp_dir("fit-options-accumulate"));
  opts.max_epochs = 2;
  Trainer t(opts, {std::make_shared<Accumulation>()});
  auto dl = make_loader();  // 8 batches an epoch
  t.fit(*m, dl);
  CHECK(t.global_step() == 8 + 4);
  // A new fit starts again from trainer.accumulate_grad_batches.
  CHECK(t.accumulate_grad_batches == 2);
}
