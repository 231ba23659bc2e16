// A ModelCheckpoint or EarlyStopping monitor that is never logged, in a fit without a validation
// loop: refused at the end of the first training epoch (there is no later chance for it to
// appear), as Lightning raises, instead of never saving / never stopping in silence.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <functional>

#include "boring_model.h"
#include "error_capture.h"
#include "trainer/trainer_support.h"
#include "volt/callbacks/early_stopping.h"
#include "volt/callbacks/model_checkpoint.h"
#include "volt/core/errors.h"

using namespace volt;
using namespace volt::testing;
using Catch::Matchers::Contains;

namespace {
TrainerOptions two_epochs(const std::string& name) {
  auto o = quiet_options(temp_dir(name));
  o.enable_checkpointing = true;
  o.max_epochs = 2;
  return o;
}
}  // namespace

TEST_CASE("ModelCheckpoint: a monitor never logged, with no validation loop, fails at the first epoch's end",
          "[callbacks][checkpoint][refusals]") {
  for (const int64_t every_n_train_steps : {int64_t{0}, int64_t{1}}) {
    DYNAMIC_SECTION("every_n_train_steps " << every_n_train_steps) {
      ModelCheckpointOptions mo;
      mo.monitor = "train_los";  // a typo of train_loss
      mo.every_n_train_steps = every_n_train_steps;
      Trainer t(two_epochs("monitor-no-val"), {std::make_shared<ModelCheckpoint>(mo)});
      auto m = make_model(0);
      auto train = make_loader(16, 8);
      CHECK_THAT(config_error([&] { t.fit(*m, train); }),
                 Contains("monitor='train_los'") && Contains("train_loss") && Contains("log('train_los', value)"));
      CHECK(t.global_step() == 2);  // the first epoch ran: metrics logged by its end count
    }
  }
  // A training metric is found: no error.
  ModelCheckpointOptions ok;
  ok.monitor = "train_loss";
  Trainer t(two_epochs("monitor-train"), {std::make_shared<ModelCheckpoint>(ok)});
  auto m = make_model(0);
  auto train = make_loader(16, 8);
  t.fit(*m, train);
  CHECK(t.global_step() == 4);
}

TEST_CASE("EarlyStopping: a monitor never logged, with no validation loop, fails at the first epoch's end",
          "[callbacks][refusals]") {
  EarlyStoppingOptions eo;  // monitor val_loss, strict
  Trainer t(two_epochs("early-no-val"), {std::make_shared<EarlyStopping>(eo)});
  auto m = make_model(0);
  auto train = make_loader(16, 8);
  CHECK_THAT(config_error([&] { t.fit(*m, train); }), Contains("EarlyStopping: monitor 'val_loss' was never logged") &&
                                                          Contains("train_loss") && Contains("no validation loop") &&
                                                          Contains("strict=false"));
  CHECK(t.global_step() == 2);

  // strict=false: no error; with validation every other epoch, the first epoch's end waits for it.
  eo.strict = false;
  Trainer lenient(two_epochs("early-no-val-lenient"), {std::make_shared<EarlyStopping>(eo)});
  lenient.fit(*m, train);
  CHECK(lenient.global_step() == 4);
  EarlyStoppingOptions strict;
  auto o = two_epochs("early-val-later");
  o.check_val_every_n_epoch = 2;
  Trainer later(o, {std::make_shared<EarlyStopping>(strict)});
  auto val = make_loader(16, 8);
  later.fit(*m, train, &val);
  CHECK(later.global_step() == 4);
}
