// state_dict() / load_state_dict() of every LR scheduler: a run saved mid-schedule (through YAML
// text) and resumed in a fresh scheduler and optimizer continues bitwise as the uninterrupted run.
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "optim/lr_scheduler_support.h"
#include "volt/core/errors.h"
#include "volt/optim/lr_scheduler.h"

using namespace volt;
using volt::test::check_resume;
using volt::test::Groups;

namespace {
const std::vector<double> kTwo = {0.1, 0.03};
template <class S, class... Args>
test::MakeScheduler make(Args... args) {
  return [=](torch::optim::Optimizer& o) { return std::make_shared<S>(o, args...); };
}
}  // namespace

TEST_CASE("every scheduler resumes bitwise from its state_dict", "[unit][lr_scheduler]") {
  SECTION("StepLR") { check_resume(make<StepLR>(int64_t{3}, 0.3), kTwo, 12, 5); }
  SECTION("MultiStepLR") { check_resume(make<MultiStepLR>(std::vector<int64_t>{2, 5, 5, 9}, 0.7), kTwo, 12, 4); }
  SECTION("ExponentialLR") { check_resume(make<ExponentialLR>(0.93), kTwo, 15, 7); }
  SECTION("LinearLR, saved during the ramp") { check_resume(make<LinearLR>(0.1, 0.9, int64_t{6}), kTwo, 10, 3); }
  SECTION("LambdaLR") {
    check_resume(
        [](torch::optim::Optimizer& o) {
          return std::make_shared<LambdaLR>(o, [](int64_t e) { return 1.0 / std::sqrt(static_cast<double>(e + 1)); });
        },
        kTwo, 10, 4);
  }
  SECTION("CosineAnnealingLR, saved past T_max") {
    check_resume(make<CosineAnnealingLR>(int64_t{4}, 0.002), kTwo, 20, 9);
  }
  SECTION("CosineAnnealingWarmRestarts, saved inside the second period") {
    check_resume(make<CosineAnnealingWarmRestarts>(int64_t{3}, int64_t{2}, 0.0005), kTwo, 25, 5);
  }
  SECTION("OneCycleLR with SGD's momentum") {
    OneCycleLROptions o;
    o.max_lr = {0.3, 0.1};
    o.total_steps = 17;
    o.three_phase = true;
    check_resume(make<OneCycleLR>(o), kTwo, 17, 8);
  }
  SECTION("OneCycleLR with Adam's beta1, linear") {
    OneCycleLROptions o;
    o.max_lr = {0.3};
    o.epochs = 4;
    o.steps_per_epoch = 5;
    o.anneal_strategy = "linear";
    check_resume(make<OneCycleLR>(o), kTwo, 20, 11, {}, /*adam=*/true);
  }
  SECTION("ReduceLROnPlateau, saved in a cooldown with bad steps counted") {
    ReduceLROnPlateauOptions o;
    o.factor = 0.5;
    o.patience = 1;
    o.cooldown = 2;
    o.min_lr = {0.01};
    const std::vector<double> metrics = {1.0, 0.9, 0.95, 0.97, 0.96, 0.99, 0.8, 0.81, 0.82, 0.83, 0.84, 0.85, 0.86};
    for (int split : {3, 4, 5, 8}) {
      INFO("saved after " << split);
      check_resume(make<ReduceLROnPlateau>(o), kTwo, static_cast<int>(metrics.size()), split, metrics);
    }
  }
  SECTION("ReduceLROnPlateau in max mode, saved before any metric (best = -inf)") {
    ReduceLROnPlateauOptions o;
    o.mode = "max";
    o.patience = 0;
    check_resume(make<ReduceLROnPlateau>(o), kTwo, 4, 0, {0.5, 0.4, 0.6, 0.3});
  }
  SECTION("SequentialLR: warm-up then cosine, saved in either part") {
    auto warmup_cosine = [](torch::optim::Optimizer& o) {
      auto warmup = std::make_shared<LinearLR>(o, 0.1, 1.0, 4);
      auto cosine = std::make_shared<CosineAnnealingLR>(o, 7, 0.001);
      return std::make_shared<SequentialLR>(o, std::vector<std::shared_ptr<LRScheduler>>{warmup, cosine},
                                            std::vector<int64_t>{4});
    };
    for (int split : {2, 4, 5, 9}) {
      INFO("saved after " << split);
      check_resume(warmup_cosine, kTwo, 14, split);
    }
  }
  SECTION("SequentialLR with warm restarts and OneCycleLR inside") {
    auto three = [](torch::optim::Optimizer& o) {
      auto a = std::make_shared<CosineAnnealingWarmRestarts>(o, 2, 2);
      auto b = std::make_shared<OneCycleLR>(o, 0.2, 6);
      auto c = std::make_shared<ExponentialLR>(o, 0.8);
      return std::make_shared<SequentialLR>(o, std::vector<std::shared_ptr<LRScheduler>>{a, b, c},
                                            std::vector<int64_t>{5, 11});
    };
    for (int split : {3, 7, 12}) {
      INFO("saved after " << split);
      check_resume(three, kTwo, 15, split);
    }
  }
}

TEST_CASE("scheduler state: the saved values and the older {name, last_epoch} form", "[unit][lr_scheduler]") {
  SECTION("doubles are exact strings; inf survives YAML text") {
    Groups g(kTwo);
    ReduceLROnPlateau s(*g.opt);
    YAML::Node st = YAML::Load(YAML::Dump(s.state_dict()));
    CHECK(st["best"].as<std::string>() == "inf");
    CHECK(st["last_lrs"][0].as<std::string>() == "0.10000000000000001");
    CHECK(st["base_lrs"][1].as<std::string>() == "0.029999999999999999");
    CHECK(st["num_bad_epochs"].as<int64_t>() == 0);
    Groups g2(kTwo);
    ReduceLROnPlateau s2(*g2.opt);
    s2.step(3.0);
    s2.load_state_dict(st);
    CHECK(s2.best() == std::numeric_limits<double>::infinity());
    CHECK(s2.last_epoch() == 0);
  }
  SECTION("a state of {name, last_epoch} restores the position from the closed form") {
    Groups g(kTwo);
    CosineAnnealingWarmRestarts s(*g.opt, 2, 2, 0.001);
    s.load_state_dict(YAML::Load("{name: CosineAnnealingWarmRestarts, last_epoch: 7}"));
    CHECK(s.last_epoch() == 7);
    CHECK(s.t_i() == 8);
    CHECK(s.t_cur() == 1);
    Groups ref(kTwo);
    CosineAnnealingWarmRestarts r(*ref.opt, 2, 2, 0.001);
    for (int k = 0; k < 7; ++k) r.step();
    CHECK(s.current_lrs()[0] == Approx(r.current_lrs()[0]).epsilon(1e-14));
    s.step();
    r.step();
    CHECK(s.current_lrs()[1] == Approx(r.current_lrs()[1]).epsilon(1e-14));

    Groups g2(kTwo);
    StepLR step(*g2.opt, 2, 0.5);
    step.load_state_dict(YAML::Load("{name: StepLR, last_epoch: 5}"));
    CHECK(step.current_lrs()[0] == Approx(0.025));
    Groups g3(kTwo);
    ReduceLROnPlateau plateau(*g3.opt);
    plateau.load_state_dict(YAML::Load("{last_epoch: 3}"));
    CHECK(plateau.last_epoch() == 3);
  }
  SECTION("a state that does not fit is a CheckpointError") {
    Groups g(kTwo);
    StepLR s(*g.opt, 2);
    CHECK_THROWS_AS(s.load_state_dict(YAML::Load("{name: StepLR}")), CheckpointError);
    CHECK_THROWS_AS(s.load_state_dict(YAML::Load("{last_epoch: x}")), CheckpointError);
    CHECK_THROWS_AS(s.load_state_dict(YAML::Load("{last_epoch: 2, last_lrs: [0.1]}")), CheckpointError);
    CHECK_THROWS_AS(s.load_state_dict(YAML::Load("{last_epoch: 2, last_lrs: [0.1, abc]}")), CheckpointError);
    Groups g2(kTwo);
    auto a = std::make_shared<LinearLR>(*g2.opt);
    auto b = std::make_shared<ExponentialLR>(*g2.opt, 0.9);
    SequentialLR seq(*g2.opt, {a, b}, {3});
    YAML::Node st = seq.state_dict();
    st["schedulers"][1]["name"] = "StepLR";
    CHECK_THROWS_WITH(seq.load_state_dict(st), Catch::Contains("StepLR") && Catch::Contains("ExponentialLR"));
    Groups g3(kTwo);
    OneCycleLR one(*g3.opt, 0.1, 10);
    CHECK_THROWS_AS(one.load_state_dict(YAML::Load("{last_epoch: 12}")), CheckpointError);
  }
}
