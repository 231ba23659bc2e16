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
    CosineAnnealingLR s(opt, 4, 0.1);  // eta_min is absolute, as PyTorch's
    for (int e = 1; e <= 6; ++e) {
      s.step();
      const double t = e / 4.0;  // past T_max the cosine rises again, as PyTorch's
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

namespace {
/// SGD with ReduceLROnPlateau on "val_score", whose value the test scripts per epoch.
class PlateauModel : public BoringModel {
 public:
  PlateauModel(std::vector<double> script, std::string monitor, bool strict = true)
      : script_(std::move(script)), monitor_(std::move(monitor)), strict_(strict) {}
  void validation_step(const Batch& b, int64_t i) override {
    BoringModel::validation_step(b, i);
    log("val_score", script_.at(static_cast<size_t>(trainer()->current_epoch())));
  }
  Optimizers configure_optimizers() override {
    OptimizerConfig c;
    c.optimizer = std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1));
    ReduceLROnPlateauOptions po;
    po.patience = 1;
    po.factor = 0.5;
    c.lr_scheduler = std::make_shared<ReduceLROnPlateau>(*c.optimizer, po);
    c.monitor = monitor_;
    c.strict = strict_;
    return c;
  }

 private:
  std::vector<double> script_;
  std::string monitor_;
  bool strict_;
};
}  // namespace

TEST_CASE("ReduceLROnPlateau steps after each epoch's validation with its monitor", "[trainer][lr_scheduler]") {
  auto fit = [](PlateauModel& m, int64_t epochs) {
    auto rec = std::make_shared<LrRecorder>();
    auto opts = quiet_options(temp_dir("trainer-plateau"));
    opts.max_epochs = epochs;
    opts.limit_train_batches = BatchLimit::count(1);
    opts.limit_val_batches = BatchLimit::count(1);
    Trainer t(opts, {rec});
    auto dl = make_loader();
    auto val = make_loader();
    t.fit(m, dl, &val);
    rec->lrs.push_back(t.optimizer()->param_groups()[0].options().get_lr());
    return rec->lrs;
  };
  SECTION("no improvement for more than `patience` epochs halves the lr") {
    // PyTorch: best 1.0, then 0.9 (better), 0.9, 0.9 (2 bad > patience 1: halve), 0.9, 0.9 (halve).
    PlateauModel m({1.0, 0.9, 0.9, 0.9, 0.9, 0.9}, "val_score");
    const std::vector<double> want = {0.1, 0.1, 0.1, 0.1, 0.05, 0.05, 0.025};
    auto got = fit(m, 6);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-12));
  }
  SECTION("a monitor that was never logged") {
    PlateauModel strict({1.0, 1.0}, "val_acc");
    CHECK_THROWS_WITH(fit(strict, 2),
                      Catch::Contains("val_acc") && Catch::Contains("val_score") && Catch::Contains("not available"));
    PlateauModel lenient({1.0, 1.0}, "val_acc", /*strict=*/false);
    CHECK(fit(lenient, 2).back() == 0.1);  // a warning each epoch, no step
  }
  SECTION("no monitor at all") {
    PlateauModel m({1.0}, "");
    CHECK_THROWS_WITH(fit(m, 1), Catch::Contains("monitor"));
  }
}
