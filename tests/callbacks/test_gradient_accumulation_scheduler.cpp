// GradientAccumulationScheduler: the optimizer steps at the batches each epoch's factor gives,
// and Lightning's refusals.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <map>
#include <vector>

#include "boring_model.h"
#include "volt/callbacks/gradient_accumulation_scheduler.h"
#include "volt/callbacks/lambda_callback.h"
#include "volt/core/errors.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;

namespace {
/// (epoch, batch_idx) of every optimizer step, and each epoch's trainer.accumulate_grad_batches.
struct StepLog {
  std::vector<std::pair<int64_t, int64_t>> steps;
  std::map<int64_t, int64_t> factors;
  int64_t batch = -1;
  std::shared_ptr<LambdaCallback> callback() {
    LambdaCallback::Hooks h;
    h.on_train_batch_start = [this](Trainer&, LightningModule&, const Batch&, int64_t i) { batch = i; };
    h.on_before_optimizer_step = [this](Trainer& t, LightningModule&, torch::optim::Optimizer&) {
      steps.emplace_back(t.current_epoch(), batch);
    };
    h.on_train_batch_end = [this](Trainer& t, LightningModule&, const torch::Tensor&, const Batch&, int64_t) {
      factors[t.current_epoch()] = t.accumulate_grad_batches;
    };
    return std::make_shared<LambdaCallback>(h, "StepLog");
  }
};
}  // namespace

TEST_CASE("GradientAccumulationScheduler: the optimizer steps at each epoch's accumulation boundaries",
          "[callbacks][grad_accum_scheduler]") {
  torch::manual_seed(0);
  BoringModel model;
  DataLoader loader(std::make_shared<RandomDataset>(14), DataLoaderOptions{2, false, false, 0});  // 7 batches
  auto o = quiet_options(temp_dir("grad-accum-sched"));
  o.max_epochs = 4;
  StepLog log;
  // Epoch 0 has no key: factor 1; epochs 1-2: 2; epoch 3: 4.
  Trainer trainer(
      o, {std::make_shared<GradientAccumulationScheduler>(std::map<int64_t, int64_t>{{1, 2}, {3, 4}}), log.callback()});
  trainer.fit(model, loader);
  std::vector<std::pair<int64_t, int64_t>> expected;
  for (int64_t i = 0; i < 7; ++i) expected.emplace_back(0, i);
  for (int64_t e : {1, 2})
    for (int64_t i : {1, 3, 5, 6}) expected.emplace_back(e, i);  // the epoch's last batch steps too
  for (int64_t i : {3, 6}) expected.emplace_back(3, i);
  CHECK(log.steps == expected);
  CHECK(log.factors == std::map<int64_t, int64_t>{{0, 1}, {1, 2}, {2, 2}, {3, 4}});
  CHECK(trainer.global_step() == static_cast<int64_t>(expected.size()));
}

TEST_CASE("GradientAccumulationScheduler: the factor of each epoch", "[callbacks][grad_accum_scheduler]") {
  GradientAccumulationScheduler s(std::map<int64_t, int64_t>{{0, 8}, {4, 1}, {10, 3}});
  CHECK(s.get_accumulate_grad_batches(0) == 8);
  CHECK(s.get_accumulate_grad_batches(3) == 8);
  CHECK(s.get_accumulate_grad_batches(4) == 1);
  CHECK(s.get_accumulate_grad_batches(9) == 1);
  CHECK(s.get_accumulate_grad_batches(25) == 3);
  CHECK(s.going_to_accumulate_grad_batches());
  CHECK_FALSE(GradientAccumulationScheduler(std::map<int64_t, int64_t>{{2, 1}}).going_to_accumulate_grad_batches());
  CHECK(GradientAccumulationScheduler(std::map<int64_t, int64_t>{{2, 5}}).get_accumulate_grad_batches(1) == 1);
}

TEST_CASE("GradientAccumulationScheduler: Lightning's refusals", "[callbacks][grad_accum_scheduler]") {
  using Catch::Matchers::Contains;
  CHECK_THROWS_AS(GradientAccumulationScheduler(std::map<int64_t, int64_t>{}), ConfigError);
  CHECK_THROWS_WITH(GradientAccumulationScheduler(std::map<int64_t, int64_t>{{-1, 2}}), Contains("must be >= 0"));
  CHECK_THROWS_WITH(GradientAccumulationScheduler(std::map<int64_t, int64_t>{{0, 0}}), Contains("factor must be >= 1"));
  // From YAML: an epoch that is not an integer is named.
  CHECK_THROWS_WITH(
      options_from_yaml<GradientAccumulationSchedulerOptions>(YAML::Load("{scheduling: {0: 2, x: 1}}"), "cb"),
      Contains("cb.scheduling.x"));
  const auto ok = options_from_yaml<GradientAccumulationSchedulerOptions>(YAML::Load("{scheduling: {0: 2, 3: 1}}"), "");
  CHECK(ok.scheduling.factors == std::map<int64_t, int64_t>{{0, 2}, {3, 1}});
  CHECK(options_from_yaml<GradientAccumulationSchedulerOptions>(options_to_yaml(ok), "").scheduling.factors ==
        ok.scheduling.factors);

  DataLoader loader(std::make_shared<RandomDataset>(8), DataLoaderOptions{2, false, false, 0});
  SECTION("with trainer.accumulate_grad_batches set too") {
    BoringModel model;
    auto o = quiet_options(temp_dir("grad-accum-sched-both"));
    o.accumulate_grad_batches = 2;
    Trainer trainer(o, {std::make_shared<GradientAccumulationScheduler>(std::map<int64_t, int64_t>{{0, 2}})});
    CHECK_THROWS_WITH(trainer.fit(model, loader), Contains("trainer.accumulate_grad_batches"));
    CHECK(trainer.global_step() == 0);
  }
  SECTION("with manual optimization") {
    BoringModel model;
    model.automatic_optimization = false;
    Trainer trainer(quiet_options(temp_dir("grad-accum-sched-manual")),
                    {std::make_shared<GradientAccumulationScheduler>(std::map<int64_t, int64_t>{{0, 2}})});
    CHECK_THROWS_WITH(trainer.fit(model, loader), Contains("manual optimization"));
  }
}
