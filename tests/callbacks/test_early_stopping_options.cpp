// EarlyStopping's remaining Lightning options: stopping_threshold, divergence_threshold,
// check_finite, check_on_train_epoch_end and verbose, with Lightning's words for each reason.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "boring_model.h"
#include "error_capture.h"
#include "trainer/trainer_support.h"
#include "volt/callbacks/early_stopping.h"
#include "volt/core/errors.h"
#include "volt/core/options.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;
using Catch::Matchers::Contains;

namespace {

/// Logs `name` = script(number of validations so far) in every validation step.
class Scripted : public BoringModel {
 public:
  Scripted(std::vector<double> script, std::string name) : script_(std::move(script)), name_(std::move(name)) {}
  void validation_step(const Batch&, int64_t) override { log(name_, script_.at(validations)); }
  void on_validation_epoch_end() override { ++validations; }
  void on_train_epoch_start() override { ++epochs_started; }
  int64_t validations = 0;
  int64_t epochs_started = 0;

 private:
  std::vector<double> script_;
  std::string name_;
};

struct Outcome {
  int64_t epochs = 0;
  int64_t validations = 0;
  bool stopped = false;
  std::shared_ptr<EarlyStopping> es;
  std::string log;
};

/// Fit for up to `epochs` epochs of 4 batches, validation after each (or as `o` says).
Outcome run(EarlyStoppingOptions eo, std::vector<double> script, int64_t epochs = 8,
            std::function<void(TrainerOptions&)> tweak = {}, bool with_val = true) {
  auto o = quiet_options(temp_dir("es-options"));
  o.max_epochs = epochs;
  o.limit_train_batches = BatchLimit::count(4);
  o.limit_val_batches = BatchLimit::count(1);
  if (tweak) tweak(o);
  Outcome out;
  out.es = std::make_shared<EarlyStopping>(eo);
  Trainer t(o, {out.es});
  auto m = make_model<Scripted>(0, std::move(script), eo.monitor);
  auto train = make_loader(64, 8), val = make_loader(16, 8);
  Logs logs;
  t.fit(*m, train, with_val ? &val : nullptr);
  out.epochs = m->epochs_started;
  out.validations = m->validations;
  out.stopped = t.should_stop;
  out.log = logs.text.str();
  return out;
}

}  // namespace

TEST_CASE("EarlyStopping stopping_threshold stops once the monitor is better than it",
          "[callbacks][early_stopping_options]") {
  EarlyStoppingOptions eo;
  eo.patience = 10;
  eo.stopping_threshold = 0.6;
  auto r = run(eo, {1.0, 0.8, 0.6, 0.5, 0.3, 0.2, 0.1, 0.05});
  CHECK(r.epochs == 4);  // 0.6 is not below 0.6; 0.5 is
  CHECK(r.stopped);
  CHECK(r.es->stopped_epoch() == 3);
  CHECK(r.es->last_reason() == "Stopping threshold reached: val_loss = 0.5 < 0.6. Signaling Trainer to stop.");
  CHECK_THAT(r.log, Contains("Stopping threshold reached: val_loss = 0.5 < 0.6"));

  eo.monitor = "val_acc";
  eo.mode = "max";
  eo.stopping_threshold = 0.8;
  auto m = run(eo, {0.1, 0.5, 0.9, 0.95, 0.96, 0.97, 0.98, 0.99});
  CHECK(m.epochs == 3);
  CHECK(m.es->last_reason() == "Stopping threshold reached: val_acc = 0.9 > 0.8. Signaling Trainer to stop.");

  eo.stopping_threshold.reset();  // without it, the same run goes on
  CHECK_FALSE(run(eo, {0.1, 0.5, 0.9, 0.95, 0.96, 0.97, 0.98, 0.99}).stopped);
}

TEST_CASE("EarlyStopping divergence_threshold stops once the monitor is worse than it",
          "[callbacks][early_stopping_options]") {
  EarlyStoppingOptions eo;
  eo.patience = 10;
  eo.divergence_threshold = 3.0;
  auto r = run(eo, {1.0, 2.0, 3.0, 5.0, 1.0, 1.0, 1.0, 1.0});
  CHECK(r.epochs == 4);  // 3.0 is not above 3.0; 5.0 is
  CHECK(r.es->stopped_epoch() == 3);
  // Lightning prints the mode's order sign here too.
  CHECK(r.es->last_reason() == "Divergence threshold reached: val_loss = 5.0 < 3.0. Signaling Trainer to stop.");
  CHECK(r.es->wait_count() == 2);  // 2.0 and 3.0 did not improve; the divergence is not counted

  eo.mode = "max";
  eo.divergence_threshold = 0.2;
  auto m = run(eo, {0.5, 0.6, 0.1, 0.7, 0.8, 0.9, 0.9, 0.9});
  CHECK(m.epochs == 3);
  CHECK(m.es->last_reason() == "Divergence threshold reached: val_loss = 0.1 > 0.2. Signaling Trainer to stop.");
}

TEST_CASE("EarlyStopping check_finite: a nan monitor stops at once with Lightning's reason",
          "[callbacks][early_stopping_options]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EarlyStoppingOptions eo;
  eo.patience = 3;
  auto r = run(eo, {1.0, nan, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5});
  CHECK(r.epochs == 2);
  CHECK(r.stopped);
  CHECK(r.es->last_reason() ==
        "Monitored metric val_loss = nan is not finite. Previous best value was 1.000. Signaling Trainer to stop.");
  CHECK_THAT(r.log, Contains("val_loss = nan is not finite"));
  CHECK(r.es->best_score() == 1.0);

  // Off: nan is one more check without improvement (patience 3 is not reached in 3 epochs).
  eo.check_finite = false;
  auto off = run(eo, {1.0, nan, nan, 0.5, 0.5, 0.5, 0.5, 0.5}, 3);
  CHECK(off.epochs == 3);
  CHECK_FALSE(off.stopped);
  CHECK(off.es->wait_count() == 2);
}

TEST_CASE("EarlyStopping check_on_train_epoch_end: after each validation, at the epoch's end, or Lightning's rule",
          "[callbacks][early_stopping_options]") {
  EarlyStoppingOptions eo;
  eo.patience = 2;
  const std::vector<double> flat(32, 1.0);
  auto twice = [](TrainerOptions& o) { o.val_check_interval = BatchLimit::fraction(0.5); };
  SECTION("unset, validation twice an epoch: each validation counts") {
    auto r = run(eo, flat, 8, twice);
    CHECK(r.validations == 3);  // improved, then 2 without
    CHECK(r.epochs == 2);
  }
  SECTION("true: once per epoch, at its end") {
    eo.check_on_train_epoch_end = true;
    auto r = run(eo, flat, 8, twice);
    CHECK(r.epochs == 3);
    CHECK(r.validations == 6);
  }
  SECTION("false: after validation, so never without a validation loop") {
    eo.check_on_train_epoch_end = false;
    eo.monitor = "train_loss";
    auto r = run(eo, flat, 4, {}, /*with_val=*/false);
    CHECK(r.epochs == 4);
    CHECK_FALSE(r.stopped);
    CHECK(r.es->wait_count() == 0);
    CHECK(std::isinf(r.es->best_score()));
    eo.check_on_train_epoch_end.reset();  // unset: at each epoch's end
    auto u = run(eo, flat, 4, {}, false);
    CHECK(std::isfinite(u.es->best_score()));
  }
  SECTION("unset, validation every other epoch: after it") {
    auto r = run(eo, flat, 12, [](TrainerOptions& o) { o.check_val_every_n_epoch = 2; });
    CHECK(r.validations == 3);
    CHECK(r.epochs == 6);
  }
}

TEST_CASE("EarlyStopping verbose logs each improvement in Lightning's words", "[callbacks][early_stopping_options]") {
  EarlyStoppingOptions eo;
  eo.patience = 1;
  const std::vector<double> script = {1.0, 0.8, 0.9, 0.5};
  auto quiet = run(eo, script);
  CHECK_THAT(quiet.log, !Contains("improved"));
  CHECK_THAT(quiet.log, Contains("Monitored metric val_loss did not improve in the last 1 records. Best score: 0.800. "
                                 "Signaling Trainer to stop."));
  eo.verbose = true;
  auto loud = run(eo, script);
  CHECK(loud.epochs == 3);
  CHECK_THAT(loud.log, Contains("Metric val_loss improved. New best score: 1.000"));
  CHECK_THAT(loud.log, Contains("Metric val_loss improved by 0.200 >= min_delta = 0.0. New best score: 0.800"));
  CHECK_THAT(loud.log, Contains("did not improve in the last 1 records"));
  CHECK_THAT(loud.log, !Contains("[rank:"));  // one process: no rank in front

  // strict=false and a missing monitor: verbose says so, as Lightning warns.
  eo.strict = false;
  eo.monitor = "val_acc";
  auto o = quiet_options(temp_dir("es-verbose"));
  o.max_epochs = 1;
  Trainer t(o, {std::make_shared<EarlyStopping>(eo)});
  auto m = make_model(0);
  auto train = make_loader(16, 8), val = make_loader(16, 8);
  Logs logs;
  t.fit(*m, train, &val);
  CHECK_THAT(logs.text.str(), Contains("Early stopping conditioned on metric `val_acc` which is not available"));
}

TEST_CASE("EarlyStopping options in YAML, and non-finite thresholds refused", "[callbacks][early_stopping_options]") {
  auto eo = options_from_yaml<EarlyStoppingOptions>(
      YAML::Load("{stopping_threshold: 0.1, divergence_threshold: 5, check_on_train_epoch_end: false, verbose: true, "
                 "log_rank_zero_only: true}"),
      "trainer.callbacks[0].init_args");
  CHECK(eo.stopping_threshold == std::optional<double>(0.1));
  CHECK(eo.divergence_threshold == std::optional<double>(5.0));
  CHECK(eo.check_on_train_epoch_end == std::optional<bool>(false));
  CHECK(eo.verbose);
  CHECK(eo.log_rank_zero_only);
  const auto defaults = options_from_yaml<EarlyStoppingOptions>(YAML::Load("{}"), "x");
  CHECK_FALSE(defaults.stopping_threshold);
  CHECK_FALSE(defaults.divergence_threshold);
  CHECK_FALSE(defaults.check_on_train_epoch_end);
  CHECK(options_to_yaml(defaults)["stopping_threshold"].IsNull());
  EarlyStoppingOptions bad;
  bad.stopping_threshold = std::numeric_limits<double>::infinity();
  CHECK_THAT(config_error([&] { EarlyStopping{bad}; }), Contains("EarlyStopping.stopping_threshold"));
  CHECK_THAT(config_error([&] { bad.validate("trainer.callbacks[1].init_args"); }),
             Contains("trainer.callbacks[1].init_args.stopping_threshold"));
}
