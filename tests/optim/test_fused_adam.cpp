#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <limits>
#include <memory>
#include <vector>

#include "boring_model.h"
#include "volt/core/compat.h"
#include "volt/optim/fused_adam.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;

namespace {

// The gradients tests/golden/make_adam_golden.py feeds: sin(0.7 i + k) * (i mod 3 + 1) * scale.
torch::Tensor golden_grad(int k) {
  auto i = torch::arange(8, torch::kFloat);
  // The last two are tiny, so that eps (1e-6) weighs in their denominators.
  auto scale = torch::tensor({1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1e-6f, 1e-6f});
  return torch::sin(i * 0.7 + k) * (i.remainder(3) + 1) * scale;
}

torch::Tensor golden_start() { return torch::tensor({0.5f, -1.25f, 2.0f, 0.0f, -0.75f, 3.0f, 1e-3f, -2.5f}); }

template <class State>
const State& state_of(torch::optim::Optimizer& opt, const torch::Tensor& p) {
  return static_cast<const State&>(*opt.state().at(compat::optimizer_state_key(p)));
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }
/// The largest difference relative to the largest magnitude in `b` (moments span many scales).
double rel_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return max_diff(a, b) / b.abs().max().item<double>();
}

/// Three parameters (one larger than a host thread's share of a step, one tiny, one that never gets
/// a gradient) in two param groups; the same values in `a` and `b`.
struct Params {
  std::vector<torch::Tensor> a, b;
  explicit Params(uint64_t seed) {
    torch::manual_seed(seed);
    for (int64_t n : {600011, 7, 64}) {
      auto t = torch::randn({n});
      a.push_back(t.clone().requires_grad_(true));
      b.push_back(t.clone().requires_grad_(true));
    }
  }
};

template <class Opt, class Options>
std::unique_ptr<Opt> make_opt(const std::vector<torch::Tensor>& ps, const Options& o) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{ps[0], ps[2]}, std::make_unique<Options>(o));
  auto second = o;
  second.lr(o.lr() * 3);
  groups.emplace_back(std::vector<torch::Tensor>{ps[1]}, std::make_unique<Options>(second));
  return std::make_unique<Opt>(groups, o);
}

/// Steps torch::optim and the fused step side by side for `steps` steps and returns the largest
/// relative difference of the parameters and of the moments.
template <class Opt, class Options, class State>
std::pair<double, double> compare(const Options& o, int steps) {
  Params ps(7);
  auto ref = make_opt<Opt>(ps.a, o);
  auto fused = make_opt<Opt>(ps.b, o);
  double dp = 0, dm = 0;
  for (int k = 0; k < steps; ++k) {
    if (k == steps / 2)  // an LR scheduler's change is seen by both
      for (auto* opt :
           {static_cast<torch::optim::Optimizer*>(ref.get()), static_cast<torch::optim::Optimizer*>(fused.get())})
        for (auto& g : opt->param_groups()) g.options().set_lr(g.options().get_lr() * 0.5);
    for (size_t i = 0; i < 2; ++i) {
      auto g = torch::randn_like(ps.a[i]) * (1.0 + k);
      ps.a[i].mutable_grad() = g.clone();
      ps.b[i].mutable_grad() = g.clone();
    }
    ref->step();
    REQUIRE(fused_adam_step(*fused));
  }
  for (size_t i = 0; i < 2; ++i) {
    dp = std::max(dp, rel_diff(ps.b[i], ps.a[i]));
    const auto& sa = state_of<State>(*ref, ps.a[i]);
    const auto& sb = state_of<State>(*fused, ps.b[i]);
    CHECK(sa.step() == sb.step());
    dm = std::max({dm, rel_diff(sb.exp_avg(), sa.exp_avg()), rel_diff(sb.exp_avg_sq(), sa.exp_avg_sq())});
    if (sa.max_exp_avg_sq().defined()) dm = std::max(dm, rel_diff(sb.max_exp_avg_sq(), sa.max_exp_avg_sq()));
  }
  // The parameter without a gradient: untouched and without state, as torch::optim leaves it.
  CHECK(torch::equal(ps.a[2], ps.b[2]));
  CHECK(fused->state().count(compat::optimizer_state_key(ps.b[2])) == 0);
  return {dp, dm};
}

}  // namespace

namespace {

// tests/golden/make_adam_golden.py, torch 1.13: AdamW(lr .05, betas (.8, .95), eps 1e-6,
// weight_decay .1, amsgrad) and Adam (same, L2 weight decay, no amsgrad), three steps: for each,
// the parameter, exp_avg and exp_avg_sq.
const float kGolden[2][3][8] = {{{3.533899784e-01f, -1.338773012e+00f, 1.926409721e+00f, 3.146610782e-02f,
                                  -5.931483507e-01f, 3.081613064e+00f, 3.560864180e-02f, -2.469995975e+00f},
                                 {2.814198732e-01f, 1.786932349e-01f, -4.342432618e-01f, -3.107649386e-01f,
                                  -6.612491012e-01f, -5.849589705e-01f, 3.235699708e-08f, 4.889648721e-07f},
                                 {7.222158462e-02f, 2.683529556e-01f, 6.207069755e-01f, 7.473959029e-02f,
                                  2.992901504e-01f, 6.217073798e-01f, 6.704306435e-14f, 2.883803222e-13f}},
                                {{3.586246669e-01f, -1.352833629e+00f, 1.946113586e+00f, 3.116342425e-02f,
                                  -6.032949090e-01f, 3.121895552e+00f, 2.431864291e-02f, -2.350169182e+00f},
                                 {3.030175567e-01f, 1.150138900e-01f, -3.388614058e-01f, -3.118213713e-01f,
                                  -6.950548291e-01f, -4.357913733e-01f, -9.704515105e-04f, -1.192004457e-01f},
                                 {8.075924218e-02f, 2.520748675e-01f, 5.934816003e-01f, 7.524824142e-02f,
                                  3.275626302e-01f, 5.142540932e-01f, 1.171448275e-06f, 8.551553823e-03f}}};

template <class Opt, class State, class Options>
void check_golden(const Options& o, const float (&want)[3][8]) {
  auto p = golden_start().requires_grad_(true);
  Opt opt({p}, o);
  for (int k = 1; k <= 3; ++k) {
    p.mutable_grad() = golden_grad(k);
    REQUIRE(fused_adam_step(opt));
  }
  auto golden = [](const float(&v)[8]) { return torch::from_blob(const_cast<float*>(v), {8}).clone(); };
  const auto& st = state_of<State>(opt, p);
  CHECK(st.step() == 3);
  // Element by element, relative: the values span 1e-14 to 3.
  auto close = [](const torch::Tensor& a, const torch::Tensor& b) {
    return ((a - b).abs() <= b.abs() * 1e-5 + 1e-20).all().item<bool>();
  };
  CHECK(close(p, golden(want[0])));
  CHECK(close(st.exp_avg(), golden(want[1])));
  CHECK(close(st.exp_avg_sq(), golden(want[2])));
}

}  // namespace

TEST_CASE("Fused AdamW and Adam match Python PyTorch's values (golden)", "[optim]") {
  using namespace torch::optim;
  const auto betas = std::make_tuple(0.8, 0.95);
  check_golden<AdamW, AdamWParamState>(AdamWOptions(0.05).betas(betas).eps(1e-6).weight_decay(0.1).amsgrad(true),
                                       kGolden[0]);
  check_golden<Adam, AdamParamState>(AdamOptions(0.05).betas(betas).eps(1e-6).weight_decay(0.1), kGolden[1]);
}

TEST_CASE("Fused step follows torch::optim over 40 steps: every option, two groups, LR changes", "[optim]") {
  using namespace torch::optim;
  // Relative to each tensor's largest value: a few float roundings (1.2e-7 each) over 40 steps.
  constexpr double tol = 5e-6;
  SECTION("AdamW") {
    auto [dp, dm] = compare<AdamW, AdamWOptions, AdamWParamState>(AdamWOptions(1e-2), 40);
    CHECK(dp < tol);
    CHECK(dm < tol);
  }
  SECTION("AdamW, amsgrad, no weight decay, other betas") {
    auto [dp, dm] = compare<AdamW, AdamWOptions, AdamWParamState>(
        AdamWOptions(1e-2).amsgrad(true).weight_decay(0).betas(std::make_tuple(0.5, 0.9)).eps(1e-4), 40);
    CHECK(dp < tol);
    CHECK(dm < tol);
  }
  SECTION("Adam with L2 weight decay") {
    auto [dp, dm] = compare<Adam, AdamOptions, AdamParamState>(AdamOptions(1e-2).weight_decay(0.05), 40);
    CHECK(dp < tol);
    CHECK(dm < tol);
  }
  SECTION("Adam, amsgrad") {
    auto [dp, dm] = compare<Adam, AdamOptions, AdamParamState>(AdamOptions(1e-2).amsgrad(true), 40);
    CHECK(dp < tol);
    CHECK(dm < tol);
  }
}

TEST_CASE("Fused and torch::optim steps share state: either can take over", "[optim]") {
  Params ps(3);
  torch::optim::AdamW ref(ps.a, torch::optim::AdamWOptions(1e-2));
  torch::optim::AdamW mixed(ps.b, torch::optim::AdamWOptions(1e-2));
  for (int k = 0; k < 10; ++k) {
    for (size_t i = 0; i < 3; ++i) {
      auto g = torch::randn_like(ps.a[i]);
      ps.a[i].mutable_grad() = g.clone();
      ps.b[i].mutable_grad() = g.clone();
    }
    ref.step();
    if (k % 2)
      mixed.step();  // torch::optim continues from the fused step's state, and the other way round
    else
      REQUIRE(fused_adam_step(mixed));
  }
  for (size_t i = 0; i < 3; ++i) {
    CHECK(max_diff(ps.a[i], ps.b[i]) < 2e-6);
    CHECK(state_of<torch::optim::AdamWParamState>(mixed, ps.b[i]).step() == 10);
  }
}

TEST_CASE("Fused step records its in-place updates and keeps torch::optim's handling of non-finite values", "[optim]") {
  SECTION("version counters move, so autograd refuses a graph that saved the old parameter") {
    auto w = torch::randn({8}).requires_grad_(true);
    auto x = torch::randn({8}).requires_grad_(true);
    auto y = (w * x).sum();  // saves w for x's gradient
    w.mutable_grad() = torch::ones({8});
    torch::optim::AdamW opt({w}, torch::optim::AdamWOptions(0.1));
    const auto before = w._version();
    REQUIRE(fused_adam_step(opt));
    CHECK(w._version() > before);
    CHECK_THROWS_WITH(y.backward(), Catch::Contains("modified by an inplace operation"));
  }
  SECTION("no weight decay: an infinite parameter does not turn the moments into NaN") {
    auto a = torch::tensor({std::numeric_limits<float>::infinity(), 1.0f}).requires_grad_(true);
    auto b = a.detach().clone().requires_grad_(true);
    torch::optim::Adam ref({a}, torch::optim::AdamOptions(0.1));
    torch::optim::Adam fused({b}, torch::optim::AdamOptions(0.1));
    a.mutable_grad() = torch::full({2}, 0.5f);
    b.mutable_grad() = torch::full({2}, 0.5f);
    ref.step();
    REQUIRE(fused_adam_step(fused));
    const auto& sa = state_of<torch::optim::AdamParamState>(ref, a);
    const auto& sb = state_of<torch::optim::AdamParamState>(fused, b);
    CHECK(torch::isfinite(sb.exp_avg()).all().item<bool>());
    CHECK(torch::equal(sa.exp_avg(), sb.exp_avg()));
    CHECK(torch::equal(sa.exp_avg_sq(), sb.exp_avg_sq()));
  }
}

TEST_CASE("Fused step declines what it does not implement, touching nothing", "[optim]") {
  auto p = torch::randn({16}).requires_grad_(true);
  p.mutable_grad() = torch::ones({16});
  const auto before = p.detach().clone();
  SECTION("SGD") {
    torch::optim::SGD opt({p}, torch::optim::SGDOptions(0.1));
    CHECK_FALSE(fused_adam_step(opt));
  }
  SECTION("a subclass of AdamW (its step() may differ)") {
    struct MyAdamW : torch::optim::AdamW {
      using torch::optim::AdamW::AdamW;
    };
    MyAdamW opt({p}, torch::optim::AdamWOptions(0.1));
    CHECK_FALSE(fused_adam_step(opt));
  }
  SECTION("double parameters") {
    auto d = torch::randn({16}, torch::kDouble).requires_grad_(true);
    d.mutable_grad() = torch::ones({16}, torch::kDouble);
    const auto d0 = d.detach().clone();
    torch::optim::Adam opt({p, d}, torch::optim::AdamOptions(0.1));
    CHECK_FALSE(fused_adam_supported(opt));
    CHECK_FALSE(fused_adam_step(opt));
    CHECK(torch::equal(d, d0));
    CHECK(opt.state().empty());
  }
  SECTION("a non-contiguous gradient") {
    p.mutable_grad() = torch::ones({16, 2}).select(1, 0);
    torch::optim::Adam opt({p}, torch::optim::AdamOptions(0.1));
    CHECK_FALSE(fused_adam_step(opt));
  }
  CHECK(torch::equal(p, before));
}

/// BoringModel that records whether the fused step could take each optimizer step (the strategy's
/// optimizer_step uses it whenever it can).
struct FusedProbe : BoringModel {
  using BoringModel::BoringModel;
  void on_before_optimizer_step(torch::optim::Optimizer& opt) override {
    supported.push_back(fused_adam_supported(opt));
  }
  std::vector<bool> supported;
};

namespace {
/// Four AdamW steps of the fused host path at `threads` intra-op threads over parameters of
/// `sizes` in two groups (the last also in the first group when `duplicate`); returns the
/// parameters and the last one's second moment.
std::vector<torch::Tensor> threaded_steps(int threads, const std::vector<int64_t>& sizes, bool duplicate) {
  const int before = at::get_num_threads();
  at::set_num_threads(threads);
  torch::manual_seed(3);
  std::vector<torch::Tensor> ps;
  for (int64_t n : sizes) ps.push_back(torch::randn({n}).requires_grad_(true));
  std::vector<torch::Tensor> first(ps.begin(), ps.begin() + 2), second(ps.begin() + 2, ps.end());
  if (duplicate) first.push_back(ps.back());
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(first, std::make_unique<torch::optim::AdamWOptions>(0.01));
  groups.emplace_back(second, std::make_unique<torch::optim::AdamWOptions>(0.03));
  torch::optim::AdamW opt(groups, torch::optim::AdamWOptions(0.01));
  for (int k = 0; k < 4; ++k) {
    for (auto& p : ps) p.mutable_grad() = torch::randn_like(p);
    REQUIRE(fused_adam_path(opt) == AdamStepPath::Host);
    REQUIRE(fused_adam_step(opt));
  }
  at::set_num_threads(before);
  const auto& st = state_of<torch::optim::AdamWParamState>(opt, ps.back());
  CHECK(st.step() == (duplicate ? 8 : 4));  // a tensor in two groups is updated twice a step
  ps.push_back(st.exp_avg_sq());
  return ps;
}
}  // namespace

TEST_CASE("Fused host step on several threads equals one thread bit for bit", "[optim]") {
  // 800,017 elements: three threads' shares (at least 2^18 elements each), split inside the first
  // and the last parameter; an empty parameter between them.
  const std::vector<int64_t> sizes{300001, 7, 0, 500009};
  auto one = threaded_steps(1, sizes, false), three = threaded_steps(3, sizes, false);
  REQUIRE(one.size() == three.size());
  for (size_t i = 0; i < one.size(); ++i) CHECK(torch::equal(one[i], three[i]));
}

TEST_CASE("Fused host step with a parameter in two groups steps it twice in order, as torch::optim does", "[optim]") {
  const std::vector<int64_t> sizes{300001, 7, 500009};
  auto one = threaded_steps(1, sizes, true), three = threaded_steps(3, sizes, true);
  for (size_t i = 0; i < one.size(); ++i) CHECK(torch::equal(one[i], three[i]));
  // torch::optim's own step, on the same parameters and gradients.
  torch::manual_seed(3);
  std::vector<torch::Tensor> ps;
  for (int64_t n : sizes) ps.push_back(torch::randn({n}).requires_grad_(true));
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{ps[0], ps[1], ps[2]},
                      std::make_unique<torch::optim::AdamWOptions>(0.01));
  groups.emplace_back(std::vector<torch::Tensor>{ps[2]}, std::make_unique<torch::optim::AdamWOptions>(0.03));
  torch::optim::AdamW ref(groups, torch::optim::AdamWOptions(0.01));
  for (int k = 0; k < 4; ++k) {
    for (auto& p : ps) p.mutable_grad() = torch::randn_like(p);
    ref.step();
  }
  for (size_t i = 0; i < ps.size(); ++i) CHECK(rel_diff(three[i], ps[i]) < 1e-6);
}

TEST_CASE("Trainer with Adam on the CPU (fused step) matches a plain LibTorch loop", "[optim][trainer]") {
  BoringOptions bo;
  bo.adam = true;
  bo.lr = 0.01;
  torch::manual_seed(0);
  auto m = std::make_shared<FusedProbe>(bo);
  torch::manual_seed(0);
  auto ref = std::make_shared<BoringModel>(bo);
  auto data = std::make_shared<RandomDataset>(64);
  DataLoaderOptions lo;
  lo.batch_size = 8;
  DataLoader dl(data, lo);
  auto opts = quiet_options(temp_dir("fused-adam-trainer"));
  opts.max_epochs = 3;
  Trainer t(opts);
  t.fit(*m, dl);
  REQUIRE(t.global_step() == 24);
  CHECK(m->supported == std::vector<bool>(24, true));

  // BoringModel's training_step, by hand (log() needs a Trainer).
  torch::optim::Adam opt(ref->parameters(), torch::optim::AdamOptions(0.01));
  std::vector<double> losses;
  for (int epoch = 0; epoch < 3; ++epoch)
    for (int64_t b = 0; b < 8; ++b) {
      auto out = ref->forward(dl.batch(b)[0]);
      auto loss = torch::mse_loss(out, torch::ones_like(out));
      losses.push_back(loss.item<double>());
      loss.backward();
      opt.step();
      opt.zero_grad();
    }
  REQUIRE(m->losses.size() == losses.size());
  for (size_t i = 0; i < losses.size(); ++i) CHECK(m->losses[i] == Approx(losses[i]).epsilon(1e-5));
  auto pa = m->parameters(), pb = ref->parameters();
  double d = 0;
  for (size_t i = 0; i < pa.size(); ++i) d = std::max(d, max_diff(pa[i], pb[i]));
  CHECK(d < 1e-5);
}
