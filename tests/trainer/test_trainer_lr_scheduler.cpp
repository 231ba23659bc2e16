// LR schedulers driven by the Trainer: step and epoch intervals, frequency.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <vector>

#include "trainer/trainer_support.h"
#include "volt/core/errors.h"

using namespace volt;
using namespace volt::testing;

TEST_CASE("StepLR with interval step vs epoch", "[trainer][lr_scheduler]") {
  auto run = [](std::shared_ptr<ScheduledModel> m, int64_t epochs, int64_t batches, int64_t accumulate = 1) {
    auto rec = std::make_shared<LrRecorder>();
    auto opts = quiet_options(temp_dir("trainer-sched"));
    opts.max_epochs = epochs;
    opts.limit_train_batches = BatchLimit::count(batches);
    opts.accumulate_grad_batches = accumulate;
    Trainer t(opts, {rec});
    auto dl = make_loader();
    t.fit(*m, dl);
    return rec->lrs;
  };
  auto expect = [](const std::vector<double>& got, const std::vector<double>& want) {
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      INFO("batch " << i);
      CHECK(got[i] == Approx(want[i]).epsilon(1e-12));
    }
  };
  SECTION("step: lr = 0.1 * 0.5^(step // 2)") {
    expect(run(make_model<ScheduledModel>(0, "step", 2), 1, 8), {0.1, 0.1, 0.05, 0.05, 0.025, 0.025, 0.0125, 0.0125});
  }
  SECTION("epoch: stepped once per epoch") {
    expect(run(make_model<ScheduledModel>(0, "epoch", 1), 3, 2), {0.1, 0.1, 0.05, 0.05, 0.025, 0.025});
  }
  SECTION("step with frequency 2") {
    expect(run(make_model<ScheduledModel>(0, "step", 1, 2), 1, 6), {0.1, 0.1, 0.05, 0.05, 0.025, 0.025});
  }
  SECTION("step counts optimizer steps, not batches, with accumulation") {
    expect(run(make_model<ScheduledModel>(0, "step", 1), 1, 6, 2), {0.1, 0.1, 0.05, 0.05, 0.025, 0.025});
  }
  SECTION("a bad interval is a ConfigError") {
    auto m = make_model<ScheduledModel>(0, "batch", 1);
    auto opts = quiet_options(temp_dir("trainer-sched"));
    Trainer t(opts);
    auto dl = make_loader();
    CHECK_THROWS_AS(t.fit(*m, dl), ConfigError);
  }
}

TEST_CASE("LR schedulers follow PyTorch's formulas", "[trainer][lr_scheduler]") {
  torch::nn::Linear a(2, 2), b(2, 2);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(a->parameters(), std::make_unique<torch::optim::SGDOptions>(1.0));
  groups.emplace_back(b->parameters(), std::make_unique<torch::optim::SGDOptions>(0.5));
  torch::optim::SGD opt(groups, torch::optim::SGDOptions(1.0));

  SECTION("StepLR, every param group from its own base") {
    StepLR s(opt, 3, 0.1);
    std::vector<std::vector<double>> seen;
    for (int e = 0; e < 7; ++e) {
      seen.push_back(s.current_lrs());
      s.step();
    }
    for (int e = 0; e < 7; ++e) {
      CHECK(seen[e][0] == Approx(std::pow(0.1, e / 3)));
      CHECK(seen[e][1] == Approx(0.5 * std::pow(0.1, e / 3)));
    }
    CHECK(s.last_epoch() == 7);
    s.set_last_epoch(3);
    CHECK(s.current_lrs()[0] == Approx(0.1));
  }
  SECTION("CosineAnnealingLR") {
    CosineAnnealingLR s(opt, 4, 0.1);
    for (int e = 1; e <= 6; ++e) {
      s.step();
      const double t = std::min(e, 4) / 4.0;
      CHECK(s.current_lrs()[0] == Approx(0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * t))));
    }
  }
  SECTION("LambdaLR applies fn(0) at construction, as PyTorch's") {
    // torch.optim.lr_scheduler.LambdaLR(opt, lambda e: 0.1 * (e + 1)) sets lr = base * 0.1 at once:
    // the first optimizer step of a warm-up runs with the warm-up lr, not the base lr.
    LambdaLR s(opt, [](int64_t e) { return 0.1 * static_cast<double>(e + 1); });
    CHECK(s.current_lrs()[0] == Approx(0.1));
    CHECK(s.current_lrs()[1] == Approx(0.05));
    s.step();
    CHECK(s.current_lrs()[0] == Approx(0.2));
    CHECK(s.current_lrs()[1] == Approx(0.1));
  }
  CHECK_THROWS_AS(StepLR(opt, 0), ConfigError);
  CHECK_THROWS_AS(CosineAnnealingLR(opt, 0), ConfigError);
}
