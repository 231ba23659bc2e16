#pragma once
/// Cosine schedules of torch.optim.lr_scheduler: CosineAnnealingLR and CosineAnnealingWarmRestarts
/// (SGDR), with PyTorch's arguments and defaults. eta_min is an absolute lr, as PyTorch's.
/// Ownership and thread-safety as LRScheduler.
#include <cstdint>
#include <string>
#include <vector>

#include "volt/optim/lr_schedulers/lr_scheduler_base.h"

namespace volt {

/// lr = eta_min + (base - eta_min) * (1 + cos(pi * epoch / T_max)) / 2. As PyTorch's, the cosine
/// goes on past T_max (back up to base at 2 * T_max, period 2 * T_max): size T_max to the run, or
/// use CosineAnnealingWarmRestarts for restarts.
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(torch::optim::Optimizer& opt, int64_t T_max, double eta_min = 0.0);  // NOLINT: PyTorch's names
  std::string name() const override { return "CosineAnnealingLR"; }

 protected:
  std::vector<double> get_lr() override;
  std::vector<double> closed_form_lr() override;

 private:
  int64_t t_max_;
  double eta_min_;
};

/// Cosine annealing restarted every T_i steps: T_0 first, each period T_mult times the one before.
/// lr = eta_min + (base - eta_min) * (1 + cos(pi * T_cur / T_i)) / 2.
class CosineAnnealingWarmRestarts : public LRScheduler {
 public:
  CosineAnnealingWarmRestarts(torch::optim::Optimizer& opt, int64_t T_0, int64_t T_mult = 1,  // NOLINT
                              double eta_min = 0.0);
  std::string name() const override { return "CosineAnnealingWarmRestarts"; }
  using LRScheduler::step;
  void step() override;
  /// The current period's length and the steps taken in it (PyTorch's T_i, T_cur).
  int64_t t_i() const { return t_i_; }
  int64_t t_cur() const { return t_cur_; }
  YAML::Node state_dict() const override;
  void load_state_dict(const YAML::Node& state) override;

 protected:
  std::vector<double> get_lr() override;
  std::vector<double> closed_form_lr() override;

 private:
  int64_t t_0_;
  int64_t t_mult_;
  double eta_min_;
  int64_t t_i_;
  int64_t t_cur_ = 0;
};

}  // namespace volt
