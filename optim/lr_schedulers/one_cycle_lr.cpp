// PyTorch 1.13's OneCycleLR, operation for operation (see basic_lr.cpp).
#include "volt/optim/lr_schedulers/one_cycle_lr.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <cmath>
#include <tuple>

#include "volt/core/errors.h"

namespace volt {
namespace {
constexpr double kPi = 3.141592653589793;  // Python's math.pi
enum { kInitial = 0, kMax = 1, kMin = 2 };
enum { kMaxMomentum = 0, kBaseMomentum = 1 };

OneCycleLROptions with(double max_lr, int64_t total_steps) {
  OneCycleLROptions o;
  o.max_lr = {max_lr};
  o.total_steps = total_steps;
  return o;
}
}  // namespace

namespace detail {
bool has_momentum(const torch::optim::OptimizerOptions& o) {
  return dynamic_cast<const torch::optim::SGDOptions*>(&o) || dynamic_cast<const torch::optim::RMSpropOptions*>(&o) ||
         dynamic_cast<const torch::optim::AdamOptions*>(&o) || dynamic_cast<const torch::optim::AdamWOptions*>(&o);
}

double get_momentum(const torch::optim::OptimizerOptions& o) {
  if (auto* s = dynamic_cast<const torch::optim::SGDOptions*>(&o)) return s->momentum();
  if (auto* r = dynamic_cast<const torch::optim::RMSpropOptions*>(&o)) return r->momentum();
  if (auto* a = dynamic_cast<const torch::optim::AdamOptions*>(&o)) return std::get<0>(a->betas());
  if (auto* w = dynamic_cast<const torch::optim::AdamWOptions*>(&o)) return std::get<0>(w->betas());
  throw ConfigError("OneCycleLR: the optimizer has no momentum or betas");
}

void set_momentum(torch::optim::OptimizerOptions& o, double m) {
  if (auto* s = dynamic_cast<torch::optim::SGDOptions*>(&o)) {
    s->momentum(m);
  } else if (auto* r = dynamic_cast<torch::optim::RMSpropOptions*>(&o)) {
    r->momentum(m);
  } else if (auto* a = dynamic_cast<torch::optim::AdamOptions*>(&o)) {
    a->betas(std::make_tuple(m, std::get<1>(a->betas())));
  } else if (auto* w = dynamic_cast<torch::optim::AdamWOptions*>(&o)) {
    w->betas(std::make_tuple(m, std::get<1>(w->betas())));
  } else {
    throw ConfigError("OneCycleLR: the optimizer has no momentum or betas");
  }
}
}  // namespace detail

OneCycleLR::OneCycleLR(torch::optim::Optimizer& opt, double max_lr, int64_t total_steps)
    : OneCycleLR(opt, with(max_lr, total_steps)) {}

OneCycleLR::OneCycleLR(torch::optim::Optimizer& opt, OneCycleLROptions options)
    : LRScheduler(opt), options_(std::move(options)) {
  const OneCycleLROptions& o = options_;
  if (o.total_steps != 0) {
    VOLT_CHECK(o.total_steps > 0, ConfigError, "OneCycleLR: total_steps must be > 0, got ", o.total_steps);
    total_steps_ = o.total_steps;
  } else {
    VOLT_CHECK(o.epochs > 0 && o.steps_per_epoch > 0, ConfigError,
               "OneCycleLR: set total_steps, or epochs and steps_per_epoch (both > 0); got epochs ", o.epochs,
               ", steps_per_epoch ", o.steps_per_epoch);
    total_steps_ = o.epochs * o.steps_per_epoch;
  }
  VOLT_CHECK(o.pct_start >= 0.0 && o.pct_start <= 1.0, ConfigError, "OneCycleLR: pct_start must be in [0, 1], got ",
             o.pct_start);
  VOLT_CHECK(o.anneal_strategy == "cos" || o.anneal_strategy == "linear", ConfigError,
             "OneCycleLR: anneal_strategy must be 'cos' or 'linear', got '", o.anneal_strategy, "'");
  VOLT_CHECK(o.div_factor > 0.0 && o.final_div_factor > 0.0, ConfigError,
             "OneCycleLR: div_factor and final_div_factor must be > 0, got ", o.div_factor, " and ",
             o.final_div_factor);
  linear_ = o.anneal_strategy == "linear";

  const double total = static_cast<double>(total_steps_);
  if (o.three_phase) {
    phases_ = {{o.pct_start * total - 1, kInitial, kMax, kMaxMomentum, kBaseMomentum},
               {2 * o.pct_start * total - 2, kMax, kInitial, kBaseMomentum, kMaxMomentum},
               {total - 1, kInitial, kMin, kMaxMomentum, kMaxMomentum}};
  } else {
    phases_ = {{o.pct_start * total - 1, kInitial, kMax, kMaxMomentum, kBaseMomentum},
               {total - 1, kMax, kMin, kBaseMomentum, kMaxMomentum}};
  }
  // A phase of zero steps would divide 0 by 0 (PyTorch raises ZeroDivisionError when it is reached).
  double start = 0;
  for (const Phase& p : phases_) {
    VOLT_CHECK(p.end_step != start, ConfigError, "OneCycleLR: pct_start ", o.pct_start, " with total_steps ",
               total_steps_, " makes a phase of zero steps; change pct_start or total_steps");
    start = p.end_step;
  }

  const size_t n = num_groups();
  const std::vector<double> max_lrs = detail::per_group(o.max_lr, n, "OneCycleLR: max_lr");
  groups_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    VOLT_CHECK(max_lrs[i] > 0.0 && std::isfinite(max_lrs[i]), ConfigError, "OneCycleLR: max_lr must be > 0, got ",
               max_lrs[i]);
    groups_[i].lr[kInitial] = max_lrs[i] / o.div_factor;
    groups_[i].lr[kMax] = max_lrs[i];
    groups_[i].lr[kMin] = groups_[i].lr[kInitial] / o.final_div_factor;
    base_lrs_[i] = groups_[i].lr[kInitial];  // PyTorch's initial_lr
  }
  if (o.cycle_momentum) {
    auto& pg = optimizer().param_groups();
    for (auto& g : pg)
      VOLT_CHECK(detail::has_momentum(g.options()), ConfigError,
                 "OneCycleLR: cycle_momentum needs an optimizer with momentum (SGD, RMSprop) or betas (Adam, AdamW); "
                 "set cycle_momentum = false for this optimizer");
    const std::vector<double> max_m = detail::per_group(o.max_momentum, n, "OneCycleLR: max_momentum");
    const std::vector<double> base_m = detail::per_group(o.base_momentum, n, "OneCycleLR: base_momentum");
    for (size_t i = 0; i < n; ++i) {
      groups_[i].momentum[kMaxMomentum] = max_m[i];
      groups_[i].momentum[kBaseMomentum] = base_m[i];
      detail::set_momentum(pg[i].options(), max_m[i]);
    }
  }
  initial_step();
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (linear_) return (end - start) * pct + start;
  const double cos_out = std::cos(kPi * pct) + 1;
  return end + (start - end) / 2.0 * cos_out;
}

void OneCycleLR::step() {
  VOLT_CHECK(last_epoch_ + 1 <= total_steps_, ConfigError,
             "OneCycleLR: step() called past total_steps = ", total_steps_, " (positions 0..", total_steps_,
             " after construction); size total_steps to the run's scheduler steps (with interval 'step': the "
             "optimizer steps, e.g. max_epochs * batches per epoch)");
  LRScheduler::step();
}

void OneCycleLR::set_last_epoch(int64_t epoch) {
  VOLT_CHECK(epoch <= total_steps_, ConfigError, "OneCycleLR: position ", epoch,
             " is past total_steps = ", total_steps_);
  LRScheduler::set_last_epoch(epoch);
}

std::vector<double> OneCycleLR::get_lr() {
  const double step_num = static_cast<double>(last_epoch_);
  auto& pg = optimizer().param_groups();
  std::vector<double> lrs;
  for (size_t g = 0; g < groups_.size(); ++g) {
    double start_step = 0;
    for (size_t i = 0; i < phases_.size(); ++i) {
      const Phase& p = phases_[i];
      if (step_num <= p.end_step || i + 1 == phases_.size()) {
        const double pct = (step_num - start_step) / (p.end_step - start_step);
        lrs.push_back(anneal(groups_[g].lr[p.start_lr], groups_[g].lr[p.end_lr], pct));
        if (options_.cycle_momentum)
          detail::set_momentum(pg[g].options(),
                               anneal(groups_[g].momentum[p.start_momentum], groups_[g].momentum[p.end_momentum], pct));
        break;
      }
      start_step = p.end_step;
    }
  }
  return lrs;
}

void OneCycleLR::load_state_dict(const YAML::Node& state) {
  // -1: a SequentialLR child whose turn has not come.
  const int64_t epoch = detail::decode_int(state, "last_epoch", name());
  VOLT_CHECK(epoch >= -1 && epoch <= total_steps_, CheckpointError, name(), ": the saved position ", epoch,
             " is outside 0..total_steps = ", total_steps_, ": resume with the same total_steps");
  LRScheduler::load_state_dict(state);
  // base_lrs came with the state (a SequentialLR parent may have set them); older states lack them.
  if (!state["base_lrs"]) {
    base_lrs_.clear();
    for (const Group& g : groups_) base_lrs_.push_back(g.lr[kInitial]);
  }
  if (last_epoch_ >= 0) {
    // The momenta follow from the position (the schedule is closed-form); last_lrs set the lrs.
    const std::vector<double> lrs = current_lrs();
    get_lr();
    set_group_lrs(lrs);
  }
}

std::vector<double> OneCycleLR::current_momenta() const {
  std::vector<double> out;
  for (auto& g : optimizer().param_groups())
    out.push_back(detail::has_momentum(g.options()) ? detail::get_momentum(g.options()) : 0.0);
  return out;
}

}  // namespace volt
