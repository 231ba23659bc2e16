#pragma once
/// Learning-rate schedulers with state that checkpoints can save. Each scheduler sets
/// lr = base_lr[group] * factor(last_epoch) on its optimizer's param groups after every step().
/// "last_epoch" counts scheduler steps (epochs or optimizer steps, as the interval says).
/// Not thread-safe; owned by the OptimizerConfig that returns it.
#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "volt/core/choice.h"

namespace volt {

class LRScheduler {
 public:
  explicit LRScheduler(torch::optim::Optimizer& optimizer);
  virtual ~LRScheduler() = default;
  void step();
  int64_t last_epoch() const { return last_epoch_; }
  /// Restores the position (used when resuming) and re-applies the learning rates.
  void set_last_epoch(int64_t e);
  std::vector<double> current_lrs() const;
  virtual std::string name() const = 0;

 protected:
  virtual double factor(int64_t epoch) const = 0;

 private:
  void apply();
  torch::optim::Optimizer* optimizer_;
  std::vector<double> base_lrs_;
  int64_t last_epoch_ = 0;
};

/// lr = base * gamma^(floor(epoch / step_size)), as torch.optim.lr_scheduler.StepLR.
class StepLR : public LRScheduler {
 public:
  StepLR(torch::optim::Optimizer& opt, int64_t step_size, double gamma = 0.1);
  std::string name() const override { return "StepLR"; }

 protected:
  double factor(int64_t epoch) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

/// lr = base * fn(epoch), as torch.optim.lr_scheduler.LambdaLR (warm-up, custom decay).
class LambdaLR : public LRScheduler {
 public:
  LambdaLR(torch::optim::Optimizer& opt, std::function<double(int64_t)> fn);
  std::string name() const override { return "LambdaLR"; }

 protected:
  double factor(int64_t epoch) const override { return fn_(epoch); }

 private:
  std::function<double(int64_t)> fn_;
};

/// Cosine annealing from base to eta_min over t_max steps (closed form, as PyTorch's).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(torch::optim::Optimizer& opt, int64_t t_max, double eta_min_factor = 0.0);
  std::string name() const override { return "CosineAnnealingLR"; }

 protected:
  double factor(int64_t epoch) const override;

 private:
  int64_t t_max_;
  double eta_min_factor_;
};

/// When a scheduler steps: after every optimizer step ("step") or every epoch ("epoch").
enum class SchedulerInterval { Step, Epoch };
template <>
struct ChoiceNames<SchedulerInterval> {
  static const std::vector<std::pair<SchedulerInterval, const char*>>& names() {
    static const std::vector<std::pair<SchedulerInterval, const char*>> n = {{SchedulerInterval::Step, "step"},
                                                                             {SchedulerInterval::Epoch, "epoch"}};
    return n;
  }
  static std::string normalize(const std::string& s) { return s; }
};

/// What configure_optimizers returns: an optimizer, optionally a scheduler stepped every
/// `frequency` epochs or optimizer steps ("epoch" or "step"), like Lightning's lr_scheduler dict.
struct OptimizerConfig {
  std::shared_ptr<torch::optim::Optimizer> optimizer;
  std::shared_ptr<LRScheduler> lr_scheduler;
  Choice<SchedulerInterval> interval = SchedulerInterval::Epoch;
  int64_t frequency = 1;
};

}  // namespace volt
