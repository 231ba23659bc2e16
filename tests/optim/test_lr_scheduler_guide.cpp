// docs/guide.md, "Learning-rate schedulers": the guide's configure_optimizers snippets, verbatim
// where they build the schedulers, compile and give the schedule they describe.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <memory>
#include <vector>

#include "volt/module/optimizer_config.h"
#include "volt/optim/lr_scheduler.h"

namespace {
struct Guide {
  torch::nn::Linear net{4, 2};
  std::vector<torch::Tensor> parameters() { return net->parameters(); }

  volt::Optimizers warmup_cosine() {
    // ---- verbatim from the guide ----
    auto opt = std::make_shared<torch::optim::AdamW>(parameters(), torch::optim::AdamWOptions(3e-4));
    // 500 warm-up steps, then a cosine down to 1e-5 over the remaining 9500.
    auto warmup = std::make_shared<volt::LinearLR>(*opt, 0.01, 1.0, 500);
    auto cosine = std::make_shared<volt::CosineAnnealingLR>(*opt, 9500, 1e-5);
    volt::OptimizerConfig c{opt};
    c.lr_scheduler = std::make_shared<volt::SequentialLR>(
        *opt, std::vector<std::shared_ptr<volt::LRScheduler>>{warmup, cosine}, std::vector<int64_t>{500});
    c.interval = "step";
    return c;
  }

  volt::Optimizers plateau() {
    auto opt = std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1));
    // ---- verbatim from the guide ----
    volt::ReduceLROnPlateauOptions p;
    p.mode = "min";
    p.factor = 0.5;
    p.patience = 2;
    volt::OptimizerConfig c{opt};
    c.lr_scheduler = std::make_shared<volt::ReduceLROnPlateau>(*opt, p);
    c.monitor = "val_loss";  // interval "epoch": after each epoch's validation
    return c;
  }
};
}  // namespace

TEST_CASE("docs/guide.md: the learning-rate scheduler examples work as written", "[unit][lr_scheduler][docs]") {
  Guide g;
  SECTION("warm-up then cosine, stepped per optimizer step") {
    volt::Optimizers o = g.warmup_cosine();
    REQUIRE(o.size() == 1);
    CHECK(o[0].interval == volt::SchedulerInterval::Step);
    auto& s = *o[0].lr_scheduler;
    CHECK(s.current_lrs()[0] == Approx(3e-6));  // 0.01 * 3e-4 at the first step
    for (int k = 0; k < 250; ++k) s.step();
    CHECK(s.current_lrs()[0] == Approx(3e-6 + 0.5 * (3e-4 - 3e-6)));
    for (int k = 250; k < 500; ++k) s.step();
    CHECK(s.current_lrs()[0] == Approx(3e-4));
    for (int k = 500; k < 10000; ++k) s.step();
    CHECK(s.current_lrs()[0] == Approx(1e-5));
  }
  SECTION("ReduceLROnPlateau with a monitor") {
    volt::Optimizers o = g.plateau();
    CHECK(o[0].monitor == "val_loss");
    auto& s = *o[0].lr_scheduler;
    CHECK(s.needs_metric());
    for (double loss : {1.0, 1.0, 1.0}) s.step(loss);
    CHECK(s.current_lrs()[0] == Approx(0.1));
    s.step(1.0);  // the third step without improvement: more than patience 2
    CHECK(s.current_lrs()[0] == Approx(0.05));
  }
}
