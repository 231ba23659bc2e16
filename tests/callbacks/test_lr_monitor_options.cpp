// LearningRateMonitor's log_momentum and log_weight_decay: Lightning's names beside the lr, per
// param group, for SGD, Adam, AdamW and an optimizer without momentum.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "boring_model.h"
#include "error_capture.h"
#include "trainer/trainer_support.h"
#include "volt/callbacks/lr_monitor.h"
#include "volt/core/errors.h"
#include "volt/core/options.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;
using Catch::Matchers::Contains;

namespace {

/// A BoringModel whose optimizer `make` builds from its parameters.
class WithOptimizer : public BoringModel {
 public:
  using Make = std::function<std::shared_ptr<torch::optim::Optimizer>(BoringModel&)>;
  explicit WithOptimizer(Make make) : make_(std::move(make)) {}
  Optimizers configure_optimizers() override {
    OptimizerConfig c;
    c.optimizer = make_(*this);
    return c;
  }

 private:
  Make make_;
};

/// callback_metrics after one epoch of 2 steps with a LearningRateMonitor(`lo`).
std::map<std::string, double> metrics_of(LearningRateMonitorOptions lo, WithOptimizer::Make make,
                                         std::string* log = nullptr) {
  auto o = quiet_options(temp_dir("lrm-options"));
  o.limit_train_batches = BatchLimit::count(2);
  o.log_every_n_steps = 1;
  Trainer t(o, {std::make_shared<LearningRateMonitor>(lo)});
  auto m = make_model<WithOptimizer>(0, std::move(make));
  auto train = make_loader();
  Logs logs;
  t.fit(*m, train);
  if (log) *log = logs.text.str();
  return t.callback_metrics();
}

std::shared_ptr<torch::optim::Optimizer> sgd(BoringModel& m) {
  return std::make_shared<torch::optim::SGD>(m.parameters(),
                                             torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-4));
}

}  // namespace

TEST_CASE("LearningRateMonitor log_momentum and log_weight_decay, as Lightning names them",
          "[callbacks][lr_monitor_options]") {
  LearningRateMonitorOptions both;
  both.log_momentum = true;
  both.log_weight_decay = true;
  SECTION("off by default") {
    auto m = metrics_of({}, sgd);
    CHECK(m.count("lr-SGD"));
    CHECK(m.count("lr-SGD-momentum") == 0);
    CHECK(m.count("lr-SGD-weight_decay") == 0);
  }
  SECTION("SGD: its momentum") {
    auto m = metrics_of(both, sgd);
    CHECK(m.at("lr-SGD") == Approx(0.1));
    CHECK(m.at("lr-SGD-momentum") == Approx(0.9));
    CHECK(m.at("lr-SGD-weight_decay") == Approx(1e-4));
    LearningRateMonitorOptions one;
    one.log_weight_decay = true;
    auto w = metrics_of(one, sgd);
    CHECK(w.count("lr-SGD-momentum") == 0);
    CHECK(w.at("lr-SGD-weight_decay") == Approx(1e-4));
  }
  SECTION("Adam and AdamW: beta1") {
    auto a = metrics_of(both, [](BoringModel& b) {
      return std::make_shared<torch::optim::Adam>(
          b.parameters(), torch::optim::AdamOptions(0.01).betas({0.8, 0.99}).weight_decay(0.05));
    });
    CHECK(a.at("lr-Adam-momentum") == Approx(0.8));
    CHECK(a.at("lr-Adam-weight_decay") == Approx(0.05));
    auto w = metrics_of(both, [](BoringModel& b) {
      return std::make_shared<torch::optim::AdamW>(b.parameters(), torch::optim::AdamWOptions(0.01).betas({0.7, 0.9}));
    });
    CHECK(w.at("lr-AdamW-momentum") == Approx(0.7));
    CHECK(w.at("lr-AdamW-weight_decay") == Approx(0.01));  // AdamW's default
  }
  SECTION("param groups: the suffix after /pg<i>") {
    auto m = metrics_of(both, [](BoringModel& b) {
      std::vector<torch::Tensor> body, top;
      for (auto& blk : b.blocks)
        for (auto& p : blk->parameters()) body.push_back(p);
      for (auto& p : b.head->parameters()) top.push_back(p);
      std::vector<torch::optim::OptimizerParamGroup> groups;
      groups.emplace_back(body, std::make_unique<torch::optim::SGDOptions>(
                                    torch::optim::SGDOptions(0.1).momentum(0.5).weight_decay(0.01)));
      groups.emplace_back(top, std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(0.01)));
      return std::make_shared<torch::optim::SGD>(groups, torch::optim::SGDOptions(0.1));
    });
    CHECK(m.at("lr-SGD/pg1-momentum") == Approx(0.5));
    CHECK(m.at("lr-SGD/pg2-momentum") == 0.0);
    CHECK(m.at("lr-SGD/pg1-weight_decay") == Approx(0.01));
    CHECK(m.at("lr-SGD/pg2-weight_decay") == 0.0);
    CHECK(m.count("lr-SGD-momentum") == 0);
  }
  SECTION("an optimizer without momentum logs 0, with Lightning's warning") {
    std::string log;
    auto m = metrics_of(
        both,
        [](BoringModel& b) {
          return std::make_shared<torch::optim::Adagrad>(b.parameters(),
                                                         torch::optim::AdagradOptions(0.1).weight_decay(0.2));
        },
        &log);
    CHECK(m.at("lr-Adagrad-momentum") == 0.0);
    CHECK(m.at("lr-Adagrad-weight_decay") == Approx(0.2));
    CHECK_THAT(log, Contains("some optimizers do not have momentum"));
  }
}

TEST_CASE("LearningRateMonitor options from YAML, and the string constructor", "[callbacks][lr_monitor_options]") {
  const auto lo = options_from_yaml<LearningRateMonitorOptions>(
      YAML::Load("{logging_interval: epoch, log_momentum: true, log_weight_decay: true}"), "x");
  CHECK(lo.logging_interval == "epoch");
  CHECK(lo.log_momentum);
  CHECK(lo.log_weight_decay);
  // Built from the options struct, logging once per epoch: the metric is there after fit.
  auto m = metrics_of(lo, sgd);
  CHECK(m.at("lr-SGD-momentum") == Approx(0.9));
  CHECK_THROWS_AS(LearningRateMonitor(LearningRateMonitorOptions{"batch"}), ConfigError);
  CHECK_THROWS_AS(LearningRateMonitor("batch"), ConfigError);
  CHECK_NOTHROW(LearningRateMonitor("epoch"));
}
