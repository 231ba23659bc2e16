// SIGINT and SIGTERM during fit's validation or sanity check stop it at the next validation batch,
// as they stop training at the next step, instead of waiting for the whole validation epoch.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <csignal>

#include "boring_model.h"
#include "trainer/trainer_support.h"
#include "volt/core/errors.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;
using Catch::Matchers::Contains;

namespace {
/// Raises `sig` in validation_step number `at` (counted over the whole run).
struct SignalInValidation : BoringModel {
  SignalInValidation(int sig, int64_t at) : sig_(sig), at_(at) {}
  void validation_step(const Batch& b, int64_t i) override {
    if (steps++ == at_) std::raise(sig_);
    BoringModel::validation_step(b, i);
  }
  int64_t steps = 0;
  int sig_;
  int64_t at_;
};
}  // namespace

TEST_CASE("SIGTERM or SIGINT during validation or the sanity check stops fit at the next validation batch",
          "[trainer][signals]") {
  struct Case {
    const char* name;
    int sig;
    bool sanity;
  };
  for (const Case c : {Case{"SIGTERM in validation", SIGTERM, false}, Case{"SIGINT in validation", SIGINT, false},
                       Case{"SIGTERM in the sanity check", SIGTERM, true}}) {
    DYNAMIC_SECTION(c.name) {
      TrainerOptions o = quiet_options(temp_dir("signal-validation"));
      o.max_steps = 4;
      o.val_check_interval = BatchLimit::count(2);
      o.num_sanity_val_steps = c.sanity ? -1 : 0;  // -1: the whole validation set
      SignalInValidation m(c.sig, 2);
      DataLoader train = make_loader(32, 8);
      DataLoader val = make_loader(400, 8);  // 50 validation batches
      Trainer t(o);
      try {
        t.fit(m, train, &val);
        FAIL("fit returned");
      } catch (const TrainingError& e) {
        CHECK_THAT(e.what(), Contains(c.sig == SIGTERM ? "SIGTERM" : "SIGINT") &&
                                 Contains(c.sanity ? "during the sanity check" : "during validation") &&
                                 Contains("validation batch 3") && Contains("ckpt_path=last"));
      }
      CHECK(m.steps == 3);                           // the batch that got the signal finished; no more ran
      CHECK(t.global_step() == (c.sanity ? 0 : 2));  // no training step after it either
    }
  }
}
