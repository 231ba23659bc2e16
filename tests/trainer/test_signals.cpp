// SIGINT and SIGTERM end fit cleanly: the step is finished, the error names the signal and the
// step, the checkpoints already written stay, and the previous signal handlers come back.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <filesystem>

#include "boring_model.h"
#include "distributed/multi_rank.h"
#include "trainer/trainer_support.h"
#include "volt/callbacks/model_checkpoint.h"
#include "volt/checkpoint/checkpoint.h"
#include "volt/core/errors.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {
/// Sends `sig` to this process at the end of the batch with index `at`.
struct RaiseAt : Callback {
  RaiseAt(int sig, int64_t at) : sig_(sig), at_(at) {}
  std::string state_key() const override { return "RaiseAt"; }
  void on_train_batch_end(Trainer&, LightningModule&, const torch::Tensor&, const Batch&, int64_t i) override {
    if (i == at_) std::raise(sig_);
  }
  int sig_;
  int64_t at_;
};

/// The handler installed for `sig` now (the test runner has its own).
void (*handler_of(int sig))(int) {
  struct sigaction cur {};
  sigaction(sig, nullptr, &cur);
  return cur.sa_handler;
}
}  // namespace

TEST_CASE("SIGTERM or SIGINT during fit stops it at the next step with an error naming the signal",
          "[trainer][signals]") {
  for (int sig : {SIGTERM, SIGINT}) {
    INFO(sig);
    const auto before = handler_of(sig);
    const std::string root = temp_dir("signal");
    TrainerOptions o = quiet_options(root);
    o.enable_checkpointing = true;
    o.max_steps = 20;
    Trainer t(o, {every_step_checkpoint(), std::make_shared<RaiseAt>(sig, 1)});
    BoringModel m;
    auto data = std::make_shared<RandomDataset>(64);
    DataLoader loader(data, {8, false});
    try {
      t.fit(m, loader);
      FAIL("fit returned");
    } catch (const TrainingError& e) {
      CHECK_THAT(e.what(), Contains(sig == SIGTERM ? "SIGTERM" : "SIGINT") && Contains("at step 2") &&
                               Contains("ckpt_path=last"));
    }
    CHECK(t.global_step() == 2);
    CHECK(load_checkpoint_file(root + "/checkpoints/last.ckpt").global_step == 2);
    CHECK(handler_of(sig) == before);  // fit gave the previous handler back
  }
}

TEST_CASE("a signal after the last step's check still ends fit with an error, the checkpoints whole",
          "[trainer][signals]") {
  const std::string root = temp_dir("signal-late");
  TrainerOptions o = quiet_options(root);
  o.enable_checkpointing = true;
  o.max_steps = 3;
  Trainer t(o, {every_step_checkpoint(), std::make_shared<RaiseAt>(SIGINT, 2)});  // batch 2 = step 3, the last
  BoringModel m;
  auto data = std::make_shared<RandomDataset>(64);
  DataLoader loader(data, {8, false});
  try {
    t.fit(m, loader);
    FAIL("fit returned");
  } catch (const TrainingError& e) {
    CHECK_THAT(e.what(), Contains("stopped by SIGINT (received by rank 0) after the last step (step 3)"));
  }
  CHECK(load_checkpoint_file(root + "/checkpoints/last.ckpt").global_step == 3);
}

TEST_CASE("SIGTERM to one launched rank stops every rank at the same step, naming it, leaving no process",
          "[trainer][signals][multirank]") {
  for (std::string strategy : {"ddp", "fsdp"}) {
    DYNAMIC_SECTION(strategy) {
      const std::string dir = temp_dir("signal-multirank");
      auto kv = quiet_worker_kv(dir);
      kv["batch_size"] = "4";
      kv["trainer.devices"] = "2";
      kv["trainer.strategy"] = "{name: " + strategy + ", timeout: 600}";
      kv["trainer.enable_checkpointing"] = "true";
      kv["checkpoint_every_n_train_steps"] = "1";
      kv["fault_rank"] = "1";
      kv["fault_step"] = "3";
      kv["fault_kind"] = "sigterm";
      const int code = run_worker(args_for(dir + "/o.pt", kv), dir, 120);
      const std::string log = read_text(dir + "/worker.0.log");
      INFO(log);
      CHECK(code == 1);
      CHECK_THAT(log, Contains("stopped by SIGTERM (received by rank 1) at step 3"));
      CHECK_THAT(log, Contains("volt: SIGTERM received: stopping cleanly (send it again to end the process now)"));
      CHECK(load_checkpoint_file(dir + "/checkpoints/last.ckpt").global_step == 3);
      CHECK_FALSE(fs::exists(dir + "/o.pt"));
      CHECK(no_worker_left(dir));
      for (auto& e : fs::directory_iterator(dir + "/checkpoints"))  // nothing half-written
        CHECK(e.path().string().find(".tmp") == std::string::npos);
    }
  }
}

TEST_CASE("SIGTERM to one launched rank after the last step's check fails every rank, naming it",
          "[trainer][signals][multirank]") {
  const std::string dir = temp_dir("signal-late-multirank");
  auto kv = quiet_worker_kv(dir);
  kv["batch_size"] = "4";
  kv["trainer.devices"] = "2";
  kv["trainer.strategy"] = "{name: fsdp, timeout: 600}";
  kv["trainer.max_steps"] = "3";
  kv["trainer.enable_checkpointing"] = "true";
  kv["checkpoint_every_n_train_steps"] = "1";
  kv["fault_rank"] = "1";
  kv["fault_step"] = "3";
  kv["fault_kind"] = "sigterm_late";
  const int code = run_worker(args_for(dir + "/o.pt", kv), dir, 120);
  const std::string log = read_text(dir + "/worker.0.log");
  INFO(log);
  CHECK(code == 1);
  CHECK_THAT(log, Contains("stopped by SIGTERM (received by rank 1) after the last step (step 3)"));
  CHECK(load_checkpoint_file(dir + "/checkpoints/last.ckpt").global_step == 3);
  CHECK(no_worker_left(dir));
}
