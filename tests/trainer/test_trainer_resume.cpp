// save_checkpoint and fit(ckpt_path): resuming continues the run exactly.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "trainer/trainer_support.h"
#include "volt/core/errors.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;

namespace {

struct ResumeCase {
  bool shuffle;
  bool adam;
  int64_t first;  // steps before the checkpoint
  int64_t total;  // steps after resuming
};

/// A run of `total` steps equals `first` steps, saved, then resumed in a fresh trainer and a model
/// that starts from other weights. 80 samples / 8 = 10 batches per epoch.
void check_resume(const ResumeCase& c) {
  INFO("shuffle " << c.shuffle << " adam " << c.adam << " first " << c.first << " total " << c.total);
  BoringOptions bo;
  bo.adam = c.adam;
  bo.lr = c.adam ? 0.01 : 0.1;
  auto opts_for = [](int64_t steps) {
    auto o = quiet_options(temp_dir("trainer-resume"));
    o.max_epochs = -1;
    o.max_steps = steps;
    return o;
  };

  auto full = make_model(5, bo);
  int64_t full_epoch = -1;
  {
    Trainer t(opts_for(c.total));
    auto dl = make_loader(80, 8, c.shuffle, 99);
    t.fit(*full, dl);
    REQUIRE(t.global_step() == c.total);
    full_epoch = t.current_epoch();
  }
  auto part = make_model(5, bo);
  const std::string ckpt = temp_dir("trainer-resume") + "/mid.ckpt";
  {
    Trainer t(opts_for(c.first));
    auto dl = make_loader(80, 8, c.shuffle, 99);
    t.fit(*part, dl);
    REQUIRE(t.global_step() == c.first);
    t.save_checkpoint(ckpt);
  }
  auto resumed = make_model(77, bo);  // other initial weights: the checkpoint must overwrite them
  REQUIRE_FALSE(all_equal(snapshot(*resumed), snapshot(*part)));
  Trainer t(opts_for(c.total));
  auto dl = make_loader(80, 8, c.shuffle, 99);
  t.fit(*resumed, dl, nullptr, ckpt);
  CHECK(t.global_step() == c.total);
  CHECK(t.current_epoch() == full_epoch);
  // Same batches, in the same order, after the resume point.
  CHECK(resumed->losses == std::vector<double>(full->losses.begin() + c.first, full->losses.end()));
  CHECK(all_equal(snapshot(*resumed), snapshot(*full)));
}

}  // namespace

TEST_CASE("save_checkpoint + fit(ckpt_path) resumes exactly", "[trainer][resume]") {
  for (bool shuffle : {false, true})
    for (bool adam : {false, true}) {
      check_resume({shuffle, adam, 3, 6});    // mid-epoch to mid-epoch
      check_resume({shuffle, adam, 3, 15});   // mid-epoch into the next epoch
      check_resume({shuffle, adam, 10, 15});  // from an epoch boundary
    }
}

TEST_CASE("resume restores a step-interval scheduler", "[trainer][resume][lr_scheduler]") {
  auto run = [](std::shared_ptr<ScheduledModel> m, int64_t steps, const std::string& ckpt_in,
                const std::string& ckpt_out) {
    auto rec = std::make_shared<LrRecorder>();
    auto o = quiet_options(temp_dir("trainer-resume-sched"));
    o.max_epochs = -1;
    o.max_steps = steps;
    Trainer t(o, {rec});
    auto dl = make_loader(80, 8, true, 1);
    t.fit(*m, dl, nullptr, ckpt_in);
    if (!ckpt_out.empty()) t.save_checkpoint(ckpt_out);
    return rec->lrs;
  };
  const std::string ckpt = temp_dir("trainer-resume-sched") + "/s.ckpt";
  auto full = make_model<ScheduledModel>(4, "step", 2);
  auto lr_full = run(full, 13, "", "");
  auto part = make_model<ScheduledModel>(4, "step", 2);
  run(part, 5, "", ckpt);
  auto resumed = make_model<ScheduledModel>(8, "step", 2);
  auto lr_resumed = run(resumed, 13, ckpt, "");
  CHECK(lr_resumed == std::vector<double>(lr_full.begin() + 5, lr_full.end()));
  CHECK(all_equal(snapshot(*resumed), snapshot(*full)));
}

TEST_CASE("resume from an end-of-epoch last.ckpt keeps an epoch-interval scheduler in step",
          "[trainer][resume][lr_scheduler]") {
  // ModelCheckpoint saves last.ckpt in on_train_epoch_end; the epoch scheduler steps after that hook
  // (as in Lightning). Resuming from that file must still train epoch 1 with the epoch-1 lr.
  auto rec_full = std::make_shared<LrRecorder>();
  auto full = make_model<ScheduledModel>(6, "epoch", 1);
  {
    auto o = quiet_options(temp_dir("trainer-resume-epoch"));
    o.max_epochs = 3;
    o.limit_train_batches = BatchLimit::count(2);
    Trainer t(o, {rec_full});
    auto dl = make_loader();
    t.fit(*full, dl);
  }
  REQUIRE(rec_full->lrs.size() == 6);

  const std::string root = temp_dir("trainer-resume-epoch");
  auto o = quiet_options(root);
  o.limit_train_batches = BatchLimit::count(2);
  o.enable_checkpointing = true;  // the default ModelCheckpoint keeps last.ckpt
  {
    auto part = make_model<ScheduledModel>(6, "epoch", 1);
    o.max_epochs = 1;
    Trainer t(o);
    auto dl = make_loader();
    t.fit(*part, dl);
  }
  REQUIRE(fs::exists(root + "/checkpoints/last.ckpt"));
  auto rec = std::make_shared<LrRecorder>();
  auto resumed = make_model<ScheduledModel>(9, "epoch", 1);
  o.max_epochs = 3;
  Trainer t(o, {rec});
  auto dl = make_loader();
  t.fit(*resumed, dl, nullptr, "last");
  CHECK(t.global_step() == 6);
  CHECK(rec->lrs == std::vector<double>(rec_full->lrs.begin() + 2, rec_full->lrs.end()));
  CHECK(all_equal(snapshot(*resumed), snapshot(*full)));
}

TEST_CASE("resuming a checkpoint of another model is a CheckpointError", "[trainer][resume]") {
  const std::string root = temp_dir("trainer-resume-other");
  auto m = make_model(0);
  Trainer t(quiet_options(root));
  auto dl = make_loader();
  t.fit(*m, dl);
  t.save_checkpoint(root + "/a.ckpt");
  BoringOptions narrow;
  narrow.hidden = 16;
  auto other = make_model(0, narrow);
  Trainer t2(quiet_options(root));
  CHECK_THROWS_AS(t2.fit(*other, dl, nullptr, root + "/a.ckpt"), CheckpointError);
  Trainer t3(quiet_options(root));
  CHECK_THROWS_AS(t3.fit(*make_model(0), dl, nullptr, root + "/missing.ckpt"), CheckpointError);
}
