// OnExceptionCheckpoint: a fit ended by SIGTERM or a nan loss leaves on_exception.ckpt, which
// resumes; a normal fit removes a stale one; with several ranks it saves only for an error every
// rank raised, and never hangs.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <limits>

#include "boring_model.h"
#include "distributed/multi_rank.h"
#include "volt/callbacks/lambda_callback.h"
#include "volt/callbacks/on_exception_checkpoint.h"
#include "volt/checkpoint/checkpoint.h"
#include "volt/core/errors.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {
/// BoringModel whose loss turns nan at global step `nan_at` (-1: never).
class NanAt : public BoringModel {
 public:
  explicit NanAt(int64_t nan_at) : nan_at_(nan_at) {}
  torch::Tensor training_step(const Batch& b, int64_t i) override {
    torch::Tensor loss = BoringModel::training_step(b, i);
    if (trainer()->global_step() == nan_at_) return loss * std::numeric_limits<double>::quiet_NaN();
    return loss;
  }

 private:
  int64_t nan_at_;
};

DataLoader loader() { return DataLoader(std::make_shared<RandomDataset>(32), DataLoaderOptions{4, false, false, 0}); }

/// Resumes from `ckpt` for one more epoch; returns the global step training started at.
int64_t resume(const std::string& dir, const std::string& ckpt) {
  NanAt model(-1);
  auto o = quiet_options(dir);
  o.max_epochs = 2;
  int64_t start = -1;
  LambdaCallback::Hooks h;
  h.on_train_start = [&](Trainer& t, LightningModule&) { start = t.global_step(); };
  Trainer trainer(o, {std::make_shared<LambdaCallback>(h)});
  auto dl = loader();
  trainer.fit(model, dl, nullptr, ckpt);
  CHECK(trainer.global_step() == 16);
  return start;
}
}  // namespace

TEST_CASE("OnExceptionCheckpoint: a nan loss mid-fit leaves on_exception.ckpt, which resumes",
          "[callbacks][on_exception_checkpoint]") {
  const std::string dir = temp_dir("on-exception-nan");
  NanAt model(5);
  auto cb = std::make_shared<OnExceptionCheckpoint>(dir + "/ckpts");
  CHECK(cb->ckpt_path() == dir + "/ckpts/on_exception.ckpt");
  Trainer trainer(quiet_options(dir), {cb});
  auto dl = loader();
  CHECK_THROWS_AS(trainer.fit(model, dl), TrainingError);
  REQUIRE(fs::exists(cb->ckpt_path()));
  CHECK(load_checkpoint_file(cb->ckpt_path()).global_step == 5);  // before the nan step's update
  CHECK(resume(dir, cb->ckpt_path()) == 5);
}

TEST_CASE("OnExceptionCheckpoint: SIGTERM mid-fit leaves a checkpoint that resumes, a normal fit removes it",
          "[callbacks][on_exception_checkpoint]") {
  const std::string dir = temp_dir("on-exception-sigterm");
  OnExceptionCheckpointOptions oo;
  oo.dirpath = dir;
  oo.filename = "crash";
  auto cb = std::make_shared<OnExceptionCheckpoint>(oo);
  LambdaCallback::Hooks h;
  h.on_train_batch_end = [](Trainer& t, LightningModule&, const torch::Tensor&, const Batch&, int64_t) {
    if (t.global_step() == 3) std::raise(SIGTERM);
  };
  {
    NanAt model(-1);
    Trainer trainer(quiet_options(dir), {cb, std::make_shared<LambdaCallback>(h)});
    auto dl = loader();
    CHECK_THROWS_WITH(trainer.fit(model, dl), Contains("SIGTERM"));
  }
  REQUIRE(fs::exists(dir + "/crash.ckpt"));
  CHECK(load_checkpoint_file(dir + "/crash.ckpt").global_step == 3);
  CHECK(resume(dir, dir + "/crash.ckpt") == 3);
  {
    NanAt model(-1);
    Trainer trainer(quiet_options(dir), {cb});
    auto dl = loader();
    trainer.fit(model, dl);
  }
  CHECK_FALSE(fs::exists(dir + "/crash.ckpt"));
  CHECK_THROWS_WITH(OnExceptionCheckpoint(""), Contains("dirpath"));
}

TEST_CASE("OnExceptionCheckpoint under DDP(2): saves for SIGTERM on one rank, not for one rank's own error",
          "[callbacks][on_exception_checkpoint][multirank]") {
  const std::string dir = temp_dir("on-exception-ddp");
  auto kv = quiet_worker_kv(dir);
  kv["batch_size"] = "4";
  kv["trainer.devices"] = "2";
  kv["trainer.strategy"] = "{name: ddp, timeout: 600}";
  kv["fault_rank"] = "1";
  kv["fault_step"] = "3";
  kv["on_exception_dir"] = dir + "/sigterm";
  kv["fault_kind"] = "sigterm";
  fs::create_directories(dir + "/a");
  CHECK(run_worker(args_for(dir + "/o.pt", kv), dir + "/a", 120) == 1);
  INFO(read_text(dir + "/a/worker.0.log"));
  REQUIRE(fs::exists(dir + "/sigterm/on_exception.ckpt"));
  CHECK(load_checkpoint_file(dir + "/sigterm/on_exception.ckpt").global_step == 3);
  // It resumes (under DDP(2), to the end).
  auto again = quiet_worker_kv(dir);
  again["batch_size"] = "4";
  again["trainer.devices"] = "2";
  again["trainer.strategy"] = "ddp";
  again["ckpt_path"] = dir + "/sigterm/on_exception.ckpt";
  fs::create_directories(dir + "/b");
  REQUIRE(run_worker(args_for(dir + "/resumed.pt", again), dir + "/b", 120) == 0);
  CHECK(read_worker_output(dir + "/resumed.pt").global_step == 16);
  // Rank 1 alone throws: no save, no hang, every rank ends.
  kv["fault_kind"] = "throw";
  kv["on_exception_dir"] = dir + "/throw";
  fs::create_directories(dir + "/c");
  CHECK(run_worker(args_for(dir + "/c/o.pt", kv), dir + "/c", 120) == 1);
  CHECK_FALSE(fs::exists(dir + "/throw/on_exception.ckpt"));
  CHECK_THAT(read_text(dir + "/c/worker.0.log") + read_text(dir + "/c/worker.1.log"),
             Contains("OnExceptionCheckpoint: not saving"));
  CHECK(no_worker_left(dir + "/c"));
}
