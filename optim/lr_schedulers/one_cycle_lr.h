#pragma once
/// OneCycleLR: torch.optim.lr_scheduler.OneCycleLR (the 1cycle policy), stepped after every batch.
/// Ownership and thread-safety as LRScheduler.
#include <cstdint>
#include <string>
#include <vector>

#include "volt/optim/lr_schedulers/lr_scheduler_base.h"

namespace volt {

/// OneCycleLR's arguments, with PyTorch's names and defaults. A list with one value applies to
/// every param group; otherwise it needs one value per group (PyTorch's float-or-list).
struct OneCycleLROptions {
  std::vector<double> max_lr;  ///< required: the peak lr
  int64_t total_steps = 0;     ///< 0: epochs * steps_per_epoch
  int64_t epochs = 0;
  int64_t steps_per_epoch = 0;
  double pct_start = 0.3;               ///< the fraction of the cycle spent increasing the lr
  std::string anneal_strategy = "cos";  ///< "cos" or "linear"
  /// Cycle the momentum inversely to the lr between base_momentum and max_momentum: SGD's and
  /// RMSprop's momentum, Adam's and AdamW's beta1.
  bool cycle_momentum = true;
  std::vector<double> base_momentum = {0.85};
  std::vector<double> max_momentum = {0.95};
  double div_factor = 25.0;       ///< initial lr = max_lr / div_factor
  double final_div_factor = 1e4;  ///< min lr = initial lr / final_div_factor
  bool three_phase = false;       ///< a third phase anneals to the min lr (the paper's schedule)

  template <class V>
  void visit(V& v) {
    v("max_lr", max_lr)("total_steps", total_steps)("epochs", epochs)("steps_per_epoch", steps_per_epoch)(
        "pct_start", pct_start)("anneal_strategy", anneal_strategy)("cycle_momentum", cycle_momentum)(
        "base_momentum", base_momentum)("max_momentum", max_momentum)("div_factor", div_factor)(
        "final_div_factor", final_div_factor)("three_phase", three_phase);
  }
};

/// The lr rises from max_lr / div_factor to max_lr over pct_start of total_steps, then falls to
/// max_lr / div_factor / final_div_factor (cosine or linear); the momentum moves the other way. As
/// PyTorch's, positions 0..total_steps are valid (total_steps calls of step() after construction);
/// one more step() is a ConfigError and changes nothing. The momentum is set on the optimizer at
/// construction (max_momentum) and at every step.
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(torch::optim::Optimizer& opt, OneCycleLROptions options);
  OneCycleLR(torch::optim::Optimizer& opt, double max_lr, int64_t total_steps);
  std::string name() const override { return "OneCycleLR"; }
  using LRScheduler::step;
  void step() override;
  void set_last_epoch(int64_t epoch) override;
  void load_state_dict(const YAML::Node& state) override;
  int64_t total_steps() const { return total_steps_; }
  /// The momentum (or beta1) of each param group now.
  std::vector<double> current_momenta() const;

 protected:
  std::vector<double> get_lr() override;

 private:
  struct Phase {
    double end_step;
    int start_lr, end_lr, start_momentum, end_momentum;  // indexes into Group::lr / Group::momentum
  };
  struct Group {
    double lr[3];        // initial, max, min
    double momentum[2];  // max, base
  };
  double anneal(double start, double end, double pct) const;

  OneCycleLROptions options_;
  int64_t total_steps_ = 0;
  bool linear_ = false;
  std::vector<Phase> phases_;
  std::vector<Group> groups_;
};

namespace detail {
/// Whether the optimizer's param groups have a momentum OneCycleLR can cycle (SGD, RMSprop: momentum;
/// Adam, AdamW: beta1), and reading / writing it.
bool has_momentum(const torch::optim::OptimizerOptions& o);
double get_momentum(const torch::optim::OptimizerOptions& o);
void set_momentum(torch::optim::OptimizerOptions& o, double m);
}  // namespace detail

}  // namespace volt
