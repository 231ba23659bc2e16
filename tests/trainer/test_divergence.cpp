// A diverging run (nan or inf loss or weights) stops with an error naming the step and never
// replaces a good checkpoint by a non-finite one.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>

#include "boring_model.h"
#include "trainer/trainer_support.h"
#include "volt/callbacks/early_stopping.h"
#include "volt/callbacks/model_checkpoint.h"
#include "volt/checkpoint/checkpoint.h"
#include "volt/core/errors.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

/// BoringModel whose loss turns nan at global step `nan_at`.
class NanAt : public BoringModel {
 public:
  explicit NanAt(int64_t nan_at) : nan_at_(nan_at) {}
  torch::Tensor training_step(const Batch& batch, int64_t i) override {
    torch::Tensor loss = BoringModel::training_step(batch, i);
    return trainer()->global_step() == nan_at_ ? loss * std::nan("") : loss;
  }

 private:
  int64_t nan_at_;
};

bool all_finite(const std::map<std::string, torch::Tensor>& tensors) {
  for (const auto& [k, t] : tensors)
    if (t.is_floating_point() && !torch::isfinite(t).all().item<bool>()) return false;
  return true;
}

}  // namespace

TEST_CASE("A nan loss stops fit with a TrainingError naming the step, and the checkpoints before it stay",
          "[trainer][divergence]") {
  const std::string root = temp_dir("nan-loss");
  TrainerOptions o = quiet_options(root);
  o.enable_checkpointing = true;
  o.max_steps = 10;
  Trainer t(o, {every_step_checkpoint()});
  NanAt m(3);
  auto data = std::make_shared<RandomDataset>(64);
  DataLoader loader(data, {8, false});
  try {
    t.fit(m, loader);
    FAIL("fit returned");
  } catch (const TrainingError& e) {
    CHECK_THAT(e.what(), Contains("step 3") && Contains("nan") && Contains("diverged"));
  }
  CHECK(t.global_step() == 3);  // steps 0..2 ran; step 3 was stopped before its update
  const Checkpoint last = load_checkpoint_file(root + "/checkpoints/last.ckpt");
  CHECK(last.global_step == 3);
  CHECK(all_finite(last.state_dict));
}

TEST_CASE("A run whose weights explode (lr 1e6) leaves only finite checkpoints", "[trainer][divergence]") {
  const std::string root = temp_dir("explode");
  TrainerOptions o = quiet_options(root);
  o.enable_checkpointing = true;
  o.max_steps = 40;
  Trainer t(o, {every_step_checkpoint()});
  BoringOptions bo;
  bo.lr = 1e6;
  BoringModel m(bo);
  auto data = std::make_shared<RandomDataset>(64);
  DataLoader loader(data, {8, false});
  // Either the loss or, first, the weights turn non-finite: both stop the run with a clear error.
  std::string error;
  try {
    t.fit(m, loader);
  } catch (const TrainingError& e) {
    error = e.what();
  } catch (const CheckpointError& e) {
    error = e.what();
    CHECK_THAT(error, Contains("not saving") && Contains("nan or inf"));
  }
  INFO(error);
  REQUIRE_FALSE(error.empty());
  int files = 0;
  for (const auto& e : fs::directory_iterator(root + "/checkpoints")) {
    if (e.path().extension() != ".ckpt") continue;
    ++files;
    INFO(e.path());
    CHECK(all_finite(load_checkpoint_file(e.path().string()).state_dict));
  }
  CHECK(files > 0);
}

TEST_CASE("Saving weights that hold nan is refused and the previous file is kept", "[checkpoint][divergence]") {
  const std::string root = temp_dir("nan-save");
  SingleDeviceStrategy s(Precision("32-true", "cpu"), "cpu");
  BoringModel m;
  const std::string path = root + "/model.ckpt";
  s.save_checkpoint(m, {}, CheckpointHeader{}, path);
  {
    torch::NoGradGuard ng;
    m.head->weight[0][0] = std::numeric_limits<float>::infinity();
  }
  try {
    s.save_checkpoint(m, {}, CheckpointHeader{}, path);
    FAIL("saved");
  } catch (const CheckpointError& e) {
    CHECK_THAT(e.what(), Contains(path) && Contains("head.weight") && Contains("nan or inf"));
  }
  CHECK(all_finite(load_checkpoint_file(path).state_dict));
}

TEST_CASE("ModelCheckpoint filenames take numeric format specs only", "[callbacks][model_checkpoint]") {
  auto with = [](const std::string& f) {
    ModelCheckpointOptions mo;
    mo.filename = f;
    return ModelCheckpoint(mo);
  };
  CHECK_NOTHROW(with("{epoch:02d}-{step}-{val_loss:.2f}"));
  CHECK_NOTHROW(with("{val_loss:8.3e}-{train_loss}"));
  for (const char* bad : {"{train_loss:s}", "{epoch:.2d}", "{val_loss:%n}", "{val_loss:>10}", "{step:x}"}) {
    INFO(bad);
    try {
      with(bad);
      FAIL("accepted");
    } catch (const ConfigError& e) {
      CHECK_THAT(e.what(), Contains("ModelCheckpoint.filename"));
    }
  }
}

TEST_CASE("EarlyStopping without a validation loader checks the training metric at each epoch's end",
          "[callbacks][early_stopping]") {
  const std::string root = temp_dir("es-train");
  TrainerOptions o = quiet_options(root);
  o.max_epochs = 10;
  EarlyStoppingOptions eo;
  eo.monitor = "train_loss";
  eo.mode = "max";  // the loss goes down: no improvement from the second epoch on
  eo.patience = 2;
  auto es = std::make_shared<EarlyStopping>(eo);
  Trainer t(o, {es});
  BoringModel m;
  auto data = std::make_shared<RandomDataset>(32);
  DataLoader loader(data, {8, false});
  t.fit(m, loader);
  CHECK(t.current_epoch() == 2);  // epochs 0, 1, 2: the first sets the best, two more without improvement
  CHECK(es->stopped_epoch() == 2);
  CHECK(es->wait_count() == 2);
}
