// The "16-mixed" loss scaler's mechanics, on the CPU with fp32 gradients (the CUDA test in
// test_cuda.cpp trains with it): unscaling, the collective inf/nan skip, backoff and growth.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "volt/core/errors.h"
#include "volt/strategies/grad_scaler.h"

using namespace volt;

namespace {
struct Fixture {
  torch::Tensor w = torch::ones({3}).requires_grad_(true);
  torch::optim::SGD opt{std::vector<torch::Tensor>{w}, torch::optim::SGDOptions(1.0)};
  void set_grad(std::vector<float> g) { w.mutable_grad() = torch::tensor(g); }
  std::vector<float> weights() const {
    auto c = w.detach().contiguous();
    return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  }
  bool step(GradScaler& s) {
    return s.step(opt, [&] { opt.step(); });
  }
};
}  // namespace

TEST_CASE("GradScaler unscales before the step and grows the scale after growth_interval clean steps",
          "[precision][grad_scaler]") {
  Fixture f;
  GradScaler s({/*init_scale=*/8.0, /*growth_factor=*/2.0, /*backoff_factor=*/0.5, /*growth_interval=*/2});
  CHECK(s.scale_loss(torch::tensor(1.5)).item<double>() == 12.0);
  f.set_grad({8.0f, 16.0f, -8.0f});  // gradients of the scaled loss
  s.unscale(f.opt);
  CHECK(torch::equal(f.w.grad(), torch::tensor({1.0f, 2.0f, -1.0f})));
  s.unscale(f.opt);  // once per step only
  CHECK(torch::equal(f.w.grad(), torch::tensor({1.0f, 2.0f, -1.0f})));
  CHECK_FALSE(s.found_inf());
  CHECK(f.step(s));
  CHECK(f.weights() == std::vector<float>{0.0f, -1.0f, 2.0f});
  CHECK(s.scale() == 8.0);  // one clean step of two
  f.set_grad({8.0f, 8.0f, 8.0f});
  CHECK(f.step(s));  // step() unscales by itself
  CHECK(f.weights() == std::vector<float>{-1.0f, -2.0f, 1.0f});
  CHECK(s.scale() == 16.0);
}

TEST_CASE("GradScaler skips the step on inf or nan, backs off, and restarts the growth count",
          "[precision][grad_scaler]") {
  for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    DYNAMIC_SECTION("gradient " << bad) {
      Fixture f;
      GradScaler s({1024.0, 2.0, 0.5, 2});
      f.set_grad({1.0f, 1.0f, 1.0f});
      CHECK(f.step(s));  // growth count 1
      const auto before = f.weights();
      f.set_grad({1.0f, bad, 1.0f});
      CHECK_FALSE(f.step(s));
      CHECK(f.weights() == before);  // not stepped
      CHECK(s.scale() == 512.0);
      f.set_grad({1.0f, 1.0f, 1.0f});
      CHECK(f.step(s));
      CHECK(s.scale() == 512.0);  // the count restarted after the skip: 1 of 2
    }
  }
}

TEST_CASE("GradScaler: another rank's inf skips the step here too (the decision is collective)",
          "[precision][grad_scaler]") {
  Fixture f;
  bool asked = false;
  GradScaler s({4.0, 2.0, 0.5, 100}, [&](bool local_inf) {
    asked = true;
    CHECK_FALSE(local_inf);  // this rank's gradients are finite
    return true;             // but another rank found an inf
  });
  f.set_grad({4.0f, 4.0f, 4.0f});
  const auto before = f.weights();
  CHECK_FALSE(f.step(s));
  CHECK(asked);
  CHECK(f.weights() == before);
  CHECK(s.scale() == 2.0);
}

TEST_CASE("GradScaler state round-trips and bad options are ConfigErrors", "[precision][grad_scaler]") {
  Fixture f;
  GradScaler a({64.0, 2.0, 0.5, 3});
  f.set_grad({64.0f, 64.0f, 64.0f});
  f.step(a);
  f.set_grad({std::numeric_limits<float>::infinity(), 0.0f, 0.0f});
  f.step(a);  // scale 32, count 0
  f.set_grad({32.0f, 32.0f, 32.0f});
  f.step(a);  // count 1
  GradScaler b({64.0, 2.0, 0.5, 3});
  b.load_state_dict(a.state_dict());
  CHECK(b.scale() == 32.0);
  for (GradScaler* s : {&a, &b}) {  // both grow after 2 more clean steps
    Fixture g;
    g.set_grad({1.0f, 1.0f, 1.0f});
    g.step(*s);
    CHECK(s->scale() == 32.0);
    g.set_grad({1.0f, 1.0f, 1.0f});
    g.step(*s);
    CHECK(s->scale() == 64.0);
  }
  CHECK_THROWS_AS(GradScaler({0.0, 2.0, 0.5, 10}), ConfigError);
  CHECK_THROWS_AS(GradScaler({8.0, 1.0, 0.5, 10}), ConfigError);
  CHECK_THROWS_AS(GradScaler({8.0, 2.0, 1.5, 10}), ConfigError);
}
