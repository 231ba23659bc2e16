#pragma once
/// The step-wise and multiplicative schedulers of torch.optim.lr_scheduler: StepLR, MultiStepLR,
/// ExponentialLR, LinearLR and LambdaLR, with PyTorch's arguments and defaults. Each applies its
/// step 0 when constructed. Ownership and thread-safety as LRScheduler.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "volt/optim/lr_schedulers/lr_scheduler_base.h"

namespace volt {

/// lr = base * gamma^(epoch / step_size): decays by gamma every step_size steps.
class StepLR : public LRScheduler {
 public:
  StepLR(torch::optim::Optimizer& opt, int64_t step_size, double gamma = 0.1);
  std::string name() const override { return "StepLR"; }

 protected:
  std::vector<double> get_lr() override;
  std::vector<double> closed_form_lr() override;

 private:
  int64_t step_size_;
  double gamma_;
};

/// Decays by gamma at each milestone (a milestone listed k times decays by gamma^k there).
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(torch::optim::Optimizer& opt, std::vector<int64_t> milestones, double gamma = 0.1);
  std::string name() const override { return "MultiStepLR"; }

 protected:
  std::vector<double> get_lr() override;
  std::vector<double> closed_form_lr() override;

 private:
  std::map<int64_t, int> milestones_;  // PyTorch's Counter: milestone -> times listed
  double gamma_;
};

/// lr = base * gamma^epoch.
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(torch::optim::Optimizer& opt, double gamma);
  std::string name() const override { return "ExponentialLR"; }

 protected:
  std::vector<double> get_lr() override;
  std::vector<double> closed_form_lr() override;

 private:
  double gamma_;
};

/// The factor of base moves linearly from start_factor to end_factor over total_iters steps, then
/// stays (the usual warm-up: LinearLR(opt, 0.01, 1.0, warmup_steps)). start_factor in (0, 1],
/// end_factor in [0, 1].
class LinearLR : public LRScheduler {
 public:
  explicit LinearLR(torch::optim::Optimizer& opt, double start_factor = 1.0 / 3, double end_factor = 1.0,
                    int64_t total_iters = 5);
  std::string name() const override { return "LinearLR"; }

 protected:
  std::vector<double> get_lr() override;
  std::vector<double> closed_form_lr() override;

 private:
  double start_factor_;
  double end_factor_;
  int64_t total_iters_;
};

/// lr = base * lr_lambda(epoch), one function for every group or one per group. As PyTorch's for
/// plain functions, the functions are not part of state_dict().
class LambdaLR : public LRScheduler {
 public:
  using Lambda = std::function<double(int64_t)>;
  LambdaLR(torch::optim::Optimizer& opt, Lambda lr_lambda);
  LambdaLR(torch::optim::Optimizer& opt, std::vector<Lambda> lr_lambdas);
  std::string name() const override { return "LambdaLR"; }

 protected:
  std::vector<double> get_lr() override;

 private:
  std::vector<Lambda> lambdas_;
};

}  // namespace volt
