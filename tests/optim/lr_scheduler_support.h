#pragma once
// Shared helpers of the LR scheduler tests: an optimizer with one param group per base lr, row
// checks against PyTorch's golden tables (tests/golden/make_lr_golden.py), and a resume check.
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <catch2/catch.hpp>
#include <functional>
#include <memory>
#include <vector>

#include "volt/optim/lr_scheduler.h"

namespace volt::test {

using Table = std::vector<std::vector<double>>;

/// An optimizer with one param group per base lr (each group one small parameter): SGD with
/// momentum 0.9, or Adam with betas (0.9, 0.999), as make_lr_golden.py builds them.
struct Groups {
  explicit Groups(const std::vector<double>& base_lrs, bool adam = false) {
    std::vector<torch::optim::OptimizerParamGroup> groups;
    for (double lr : base_lrs) {
      params.push_back(torch::zeros({2}, torch::requires_grad()));
      if (adam)
        groups.emplace_back(std::vector<torch::Tensor>{params.back()},
                            std::make_unique<torch::optim::AdamOptions>(
                                torch::optim::AdamOptions(lr).betas(std::make_tuple(0.9, 0.999))));
      else
        groups.emplace_back(std::vector<torch::Tensor>{params.back()},
                            std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(lr).momentum(0.9)));
    }
    if (adam)
      opt = std::make_unique<torch::optim::Adam>(groups, torch::optim::AdamOptions(base_lrs[0]));
    else
      opt = std::make_unique<torch::optim::SGD>(groups, torch::optim::SGDOptions(base_lrs[0]).momentum(0.9));
  }
  std::vector<double> lrs() const {
    std::vector<double> out;
    for (auto& g : opt->param_groups()) out.push_back(g.options().get_lr());
    return out;
  }
  std::vector<torch::Tensor> params;
  std::unique_ptr<torch::optim::Optimizer> opt;
};

/// Checks current_lrs() and the optimizer's own param-group lrs against a golden row: within 1e-13
/// relative (the formulas are PyTorch's, operation for operation; only libm or FMA may differ).
inline void check_row(const LRScheduler& s, torch::optim::Optimizer& opt, const std::vector<double>& row) {
  const auto lrs = s.current_lrs();
  REQUIRE(lrs.size() == row.size());
  REQUIRE(opt.param_groups().size() == row.size());
  for (size_t g = 0; g < row.size(); ++g) {
    INFO("group " << g);
    CHECK(lrs[g] == Approx(row[g]).epsilon(1e-13).margin(1e-16));
    CHECK(opt.param_groups()[g].options().get_lr() == Approx(row[g]).epsilon(1e-13).margin(1e-16));
  }
}

/// Steps the scheduler through `golden` (row 0 at construction), then moves it with set_last_epoch
/// (the closed form) in a scrambled order, then steps on from one of those positions.
inline void check_schedule(LRScheduler& s, torch::optim::Optimizer& opt, const Table& golden) {
  for (size_t k = 0; k < golden.size(); ++k) {
    INFO(s.name() << " after " << k << " steps");
    CHECK(s.last_epoch() == static_cast<int64_t>(k));
    check_row(s, opt, golden[k]);
    if (k + 1 < golden.size()) s.step();
  }
  const int64_t n = static_cast<int64_t>(golden.size());
  for (int64_t k : {n - 1, int64_t{0}, n / 2, int64_t{1}, n - 2}) {
    INFO(s.name() << " set_last_epoch(" << k << ")");
    s.set_last_epoch(k);
    CHECK(s.last_epoch() == k);
    check_row(s, opt, golden[k]);
  }
  s.set_last_epoch(1);
  s.step();
  check_row(s, opt, golden[2]);
}

using MakeScheduler = std::function<std::shared_ptr<LRScheduler>(torch::optim::Optimizer&)>;

/// What a run leaves after each step: the lrs, the momenta (OneCycleLR) and last_epoch.
struct Trace {
  std::vector<std::vector<double>> lrs, momenta;
  std::vector<int64_t> epochs;
};

inline std::vector<double> momenta(torch::optim::Optimizer& opt) {
  std::vector<double> out;
  for (auto& g : opt.param_groups())
    out.push_back(detail::has_momentum(g.options()) ? detail::get_momentum(g.options()) : -1);
  return out;
}

/// Steps `s` from step `from` to `to`, with metrics[k] at step k when it needs one.
inline void drive(LRScheduler& s, torch::optim::Optimizer& opt, int from, int to, const std::vector<double>& metrics,
                  Trace& t) {
  for (int k = from; k < to; ++k) {
    if (s.needs_metric())
      s.step(metrics.at(static_cast<size_t>(k)));
    else
      s.step();
    t.lrs.push_back(s.current_lrs());
    t.momenta.push_back(momenta(opt));
    t.epochs.push_back(s.last_epoch());
  }
}

/// Runs `steps` steps uninterrupted, and again saving at `split`: the state through YAML text into
/// a scheduler built afresh on a fresh optimizer, then on to `steps`. The two must agree bitwise:
/// lrs, momenta, positions after every step, and the final state_dict.
inline void check_resume(const MakeScheduler& make, const std::vector<double>& base_lrs, int steps, int split,
                         const std::vector<double>& metrics = {}, bool adam = false) {
  Groups a(base_lrs, adam);
  auto sa = make(*a.opt);
  Trace whole;
  drive(*sa, *a.opt, 0, steps, metrics, whole);

  Groups b(base_lrs, adam);
  auto sb = make(*b.opt);
  Trace resumed;
  drive(*sb, *b.opt, 0, split, metrics, resumed);
  const std::string saved = YAML::Dump(sb->state_dict());
  Groups c(base_lrs, adam);
  auto sc = make(*c.opt);
  sc->load_state_dict(YAML::Load(saved));
  CHECK(sc->last_epoch() == split);
  CHECK(sc->current_lrs() == sb->current_lrs());
  CHECK(momenta(*c.opt) == momenta(*b.opt));
  drive(*sc, *c.opt, split, steps, metrics, resumed);

  REQUIRE(resumed.lrs.size() == whole.lrs.size());
  for (size_t k = 0; k < whole.lrs.size(); ++k) {
    INFO(sa->name() << " step " << k + 1 << ", saved after " << split);
    CHECK(resumed.lrs[k] == whole.lrs[k]);  // bitwise
    CHECK(resumed.momenta[k] == whole.momenta[k]);
    CHECK(resumed.epochs[k] == whole.epochs[k]);
  }
  CHECK(YAML::Dump(sc->state_dict()) == YAML::Dump(sa->state_dict()));
}

}  // namespace volt::test
