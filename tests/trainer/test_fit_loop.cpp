// The fit loop: training, max_steps, gradient accumulation and clipping, limit_train_batches.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <vector>

#include "trainer/trainer_support.h"
#include "volt/core/errors.h"

using namespace volt;
using namespace volt::testing;

namespace {

/// Gradients as the optimizer sees them in on_before_optimizer_step (before any clipping).
class GradProbe : public Callback {
 public:
  std::string state_key() const override { return "GradProbe"; }
  void on_before_optimizer_step(Trainer&, LightningModule& m, torch::optim::Optimizer&) override {
    double sq = 0;
    for (auto& p : m.parameters()) sq += p.grad().to(torch::kDouble).pow(2).sum().item<double>();
    norms.push_back(std::sqrt(sq));
  }
  std::vector<double> norms;
};

/// One manual SGD step of a BoringModel on a batch, with the gradient transformed by `clip`.
template <class Clip>
void manual_step(BoringModel& m, const Batch& batch, double lr, Clip clip) {
  auto out = m.forward(batch[0]);
  torch::mse_loss(out, torch::ones_like(out)).backward();
  std::vector<torch::Tensor> grads;
  for (auto& p : m.parameters()) grads.push_back(p.grad().clone());
  clip(grads);
  torch::NoGradGuard ng;
  auto params = m.parameters();
  for (size_t i = 0; i < params.size(); ++i) params[i].sub_(lr * grads[i]);
}

}  // namespace

TEST_CASE("BoringModel trains: the loss goes down", "[trainer]") {
  auto m = make_model(0);
  auto opts = quiet_options(temp_dir("trainer-loss"));
  opts.max_epochs = 5;
  Trainer t(opts);
  auto dl = make_loader();
  const auto before = snapshot(*m);
  t.fit(*m, dl);
  REQUIRE(m->losses.size() == 40);
  CHECK(t.global_step() == 40);
  CHECK(t.current_epoch() == 5);
  CHECK(t.num_training_batches() == 8);
  const double first = mean(m->losses, 0, 8), last = mean(m->losses, 32, 40);
  INFO("first epoch " << first << ", last epoch " << last);
  CHECK(last < 0.5 * first);
  CHECK_FALSE(all_equal(before, snapshot(*m)));
  // The last logged step value is the last loss.
  REQUIRE(t.callback_metrics().count("train_loss"));
  CHECK(t.callback_metrics().at("train_loss") == Approx(m->losses.back()));
  CHECK(t.progress_bar_metrics().count("train_loss"));
  // The module is detached from the trainer's training state afterwards but keeps working.
  CHECK(m->forward(torch::zeros({1, 32})).sizes() == torch::IntArrayRef({1, 2}));
}

TEST_CASE("max_steps stops exactly at that global step", "[trainer]") {
  for (int64_t max_steps : {1, 5, 13, 16}) {
    INFO("max_steps " << max_steps);
    auto m = make_model(0);
    auto opts = quiet_options(temp_dir("trainer-maxsteps"));
    opts.max_epochs = -1;
    opts.max_steps = max_steps;
    Trainer t(opts);
    auto dl = make_loader();
    t.fit(*m, dl);
    CHECK(t.global_step() == max_steps);
    CHECK(static_cast<int64_t>(m->losses.size()) == max_steps);
  }
  // max_epochs wins when it comes first.
  auto m = make_model(0);
  auto opts = quiet_options(temp_dir("trainer-maxsteps"));
  opts.max_epochs = 2;
  opts.max_steps = 100;
  Trainer t(opts);
  auto dl = make_loader();
  t.fit(*m, dl);
  CHECK(t.global_step() == 16);
}

TEST_CASE("accumulate_grad_batches equals a doubled batch", "[trainer]") {
  auto accum = make_model(1);
  auto big = make_model(1);
  const auto init = snapshot(*accum);
  {
    auto opts = quiet_options(temp_dir("trainer-accum"));
    opts.accumulate_grad_batches = 2;
    Trainer t(opts);
    auto dl = make_loader(64, 8);
    t.fit(*accum, dl);
    CHECK(t.global_step() == 4);  // 8 batches / 2
    CHECK(accum->losses.size() == 8);
  }
  {
    auto opts = quiet_options(temp_dir("trainer-accum"));
    Trainer t(opts);
    auto dl = make_loader(64, 16);
    t.fit(*big, dl);
    CHECK(t.global_step() == 4);
  }
  CHECK(max_abs_diff(init, snapshot(*accum)) > 1e-3);  // it trained
  CHECK(max_abs_diff(snapshot(*accum), snapshot(*big)) < 1e-6);

  // A last partial accumulation still steps (7 batches, accumulate 2: 4 steps).
  auto m = make_model(1);
  auto opts = quiet_options(temp_dir("trainer-accum"));
  opts.accumulate_grad_batches = 2;
  opts.limit_train_batches = BatchLimit::count(7);
  opts.max_epochs = 2;
  Trainer t(opts);
  auto dl = make_loader(64, 8);
  t.fit(*m, dl);
  CHECK(t.global_step() == 8);
  CHECK(m->losses.size() == 14);
}

TEST_CASE("gradient clipping by norm caps the update", "[trainer]") {
  const double clip = 0.05, lr = 0.1;
  auto m = make_model(2);
  auto ref = make_model(2);
  const auto init = snapshot(*m);
  auto probe = std::make_shared<GradProbe>();
  auto opts = quiet_options(temp_dir("trainer-clip"));
  opts.max_steps = 1;
  opts.gradient_clip_val = clip;
  Trainer t(opts, {probe});
  auto dl = make_loader();
  t.fit(*m, dl);
  REQUIRE(probe->norms.size() == 1);
  // Clipping happens after on_before_optimizer_step: the probe saw the raw norm, larger than clip.
  REQUIRE(probe->norms[0] > 10 * clip);

  manual_step(*ref, dl.batch(0), lr, [&](std::vector<torch::Tensor>& g) {
    double sq = 0;
    for (auto& x : g) sq += x.to(torch::kDouble).pow(2).sum().item<double>();
    const double total = std::sqrt(sq);
    CHECK(total == Approx(probe->norms[0]).epsilon(1e-5));
    const double coef = clip / (total + 1e-6);  // torch.nn.utils.clip_grad_norm_
    for (auto& x : g) x.mul_(coef);
  });
  CHECK(max_abs_diff(snapshot(*m), snapshot(*ref)) < 1e-7);

  // The step taken has norm lr * clip.
  double sq = 0;
  auto after = snapshot(*m);
  for (size_t i = 0; i < after.size(); ++i) sq += (after[i] - init[i]).to(torch::kDouble).pow(2).sum().item<double>();
  CHECK(std::sqrt(sq) == Approx(lr * clip).epsilon(1e-3));
}

TEST_CASE("gradient clipping by value clamps each gradient", "[trainer]") {
  const double clip = 1e-3, lr = 0.1;
  auto m = make_model(3);
  auto ref = make_model(3);
  auto unclipped = make_model(3);
  const auto init = snapshot(*m);
  auto opts = quiet_options(temp_dir("trainer-clipv"));
  opts.max_steps = 1;
  opts.gradient_clip_val = clip;
  opts.gradient_clip_algorithm = "value";
  Trainer t(opts);
  auto dl = make_loader();
  t.fit(*m, dl);
  manual_step(*ref, dl.batch(0), lr, [&](std::vector<torch::Tensor>& g) {
    for (auto& x : g) x.clamp_(-clip, clip);
  });
  manual_step(*unclipped, dl.batch(0), lr, [](std::vector<torch::Tensor>&) {});
  CHECK(max_abs_diff(snapshot(*m), snapshot(*ref)) < 1e-7);
  CHECK(max_abs_diff(snapshot(*m), snapshot(*unclipped)) > 1e-4);  // clipping mattered
  CHECK(max_abs_diff(init, snapshot(*m)) <= lr * clip * (1 + 1e-4));
}

TEST_CASE("limit_train_batches as a count and as a fraction", "[trainer]") {
  struct Case {
    BatchLimit limit;
    int64_t per_epoch;
  };
  for (auto c : {Case{BatchLimit::count(3), 3}, Case{BatchLimit::fraction(0.5), 4}, Case{BatchLimit::fraction(0.3), 2},
                 Case{BatchLimit::count(100), 8}}) {
    INFO("limit " << c.limit.value << (c.limit.is_fraction ? " (fraction)" : " (count)"));
    auto m = make_model<HookRecorder>(0);
    auto opts = quiet_options(temp_dir("trainer-limit"));
    opts.max_epochs = 2;
    opts.limit_train_batches = c.limit;
    Trainer t(opts);
    auto dl = make_loader();
    t.fit(*m, dl);
    CHECK(t.global_step() == 2 * c.per_epoch);
    CHECK(t.num_training_batches() == c.per_epoch);
    CHECK(static_cast<int64_t>(m->losses.size()) == 2 * c.per_epoch);
  }
  // Limiting to zero batches is an error that says why.
  auto m = make_model(0);
  auto opts = quiet_options(temp_dir("trainer-limit"));
  opts.limit_train_batches = BatchLimit::count(0);
  Trainer t(opts);
  auto dl = make_loader();
  CHECK_THROWS_AS(t.fit(*m, dl), ConfigError);
}
