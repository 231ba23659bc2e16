// The order of the module's hooks during fit, as Lightning calls them.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "trainer/trainer_support.h"

using namespace volt;
using namespace volt::testing;

TEST_CASE("hooks are called in Lightning's order", "[trainer][hooks]") {
  auto m = make_model<HookRecorder>(0);
  auto opts = quiet_options(temp_dir("trainer-hooks"));
  opts.limit_train_batches = BatchLimit::count(2);
  Trainer t(opts);
  auto dl = make_loader();
  t.fit(*m, dl);
  const std::vector<std::string> batch = {"on_train_batch_start",     "training_step",
                                          "on_before_backward",       "on_after_backward",
                                          "on_before_optimizer_step", "on_train_batch_end"};
  std::vector<std::string> expected = {"configure_model", "configure_optimizers", "on_fit_start", "on_train_start",
                                       "on_train_epoch_start"};
  for (int i = 0; i < 2; ++i) expected.insert(expected.end(), batch.begin(), batch.end());
  for (auto s : {"on_train_epoch_end", "on_train_end", "on_fit_end"}) expected.push_back(s);
  CHECK(m->calls == expected);
}

TEST_CASE("hooks with accumulation and end-of-epoch validation", "[trainer][hooks]") {
  auto m = make_model<HookRecorder>(0);
  auto opts = quiet_options(temp_dir("trainer-hooks"));
  opts.limit_train_batches = BatchLimit::count(2);
  opts.limit_val_batches = BatchLimit::count(1);
  opts.accumulate_grad_batches = 2;
  Trainer t(opts);
  auto dl = make_loader();
  auto val = make_loader(16, 8);
  t.fit(*m, dl, &val);
  const std::vector<std::string> expected = {
      "configure_model", "configure_optimizers", "on_fit_start", "on_train_start", "on_train_epoch_start",
      // micro-batch 0: no optimizer step
      "on_train_batch_start", "training_step", "on_before_backward", "on_after_backward", "on_train_batch_end",
      // micro-batch 1: the step
      "on_train_batch_start", "training_step", "on_before_backward", "on_after_backward", "on_before_optimizer_step",
      "on_train_batch_end",
      // validation at the end of the epoch, before on_train_epoch_end
      "on_validation_epoch_start", "validation_step", "on_validation_epoch_end", "on_train_epoch_end", "on_train_end",
      "on_fit_end"};
  CHECK(m->calls == expected);
}

TEST_CASE("the sanity check calls the validation epoch hooks, as Lightning's", "[trainer][hooks]") {
  // Lightning runs the sanity check through the validation loop, hooks included
  // (on_validation_epoch_start/end are called with trainer.sanity_checking == True).
  auto m = make_model<HookRecorder>(0);
  auto opts = quiet_options(temp_dir("trainer-hooks"));
  opts.limit_train_batches = BatchLimit::count(1);
  opts.limit_val_batches = BatchLimit::count(1);
  opts.num_sanity_val_steps = 1;
  Trainer t(opts);
  auto dl = make_loader();
  auto val = make_loader(16, 8);
  t.fit(*m, dl, &val);
  const std::vector<std::string> expected = {"configure_model",
                                             "configure_optimizers",
                                             "on_fit_start",
                                             "on_validation_epoch_start",
                                             "validation_step",
                                             "on_validation_epoch_end",  // sanity check
                                             "on_train_start",
                                             "on_train_epoch_start",
                                             "on_train_batch_start",
                                             "training_step",
                                             "on_before_backward",
                                             "on_after_backward",
                                             "on_before_optimizer_step",
                                             "on_train_batch_end",
                                             "on_validation_epoch_start",
                                             "validation_step",
                                             "on_validation_epoch_end",
                                             "on_train_epoch_end",
                                             "on_train_end",
                                             "on_fit_end"};
  CHECK(m->calls == expected);
}
