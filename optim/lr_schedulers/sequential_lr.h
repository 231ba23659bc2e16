#pragma once
/// SequentialLR: torch.optim.lr_scheduler.SequentialLR, schedulers run one after another (a
/// warm-up, then a decay). Ownership: shares ownership of its schedulers; thread-safety as
/// LRScheduler.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "volt/optim/lr_schedulers/lr_scheduler_base.h"

namespace volt {

/// Runs schedulers[0] until milestones[0], schedulers[1] until milestones[1], and so on; each
/// scheduler after the first starts from its own step 0 at its milestone. All of them must belong to
/// `opt`; milestones.size() == schedulers.size() - 1, strictly increasing, > 0.
///
/// As PyTorch's, construct the schedulers in list order just before SequentialLR (constructing one
/// applies its step 0): every scheduler scales the base lrs the first one found (PyTorch's
/// initial_lr), and SequentialLR restarts the first from its step 0. ReduceLROnPlateau and
/// SequentialLR cannot be children.
///
///   auto warmup = std::make_shared<LinearLR>(*opt, 0.01, 1.0, 500);
///   auto cosine = std::make_shared<CosineAnnealingLR>(*opt, 9500, 1e-5);
///   auto sched = std::make_shared<SequentialLR>(*opt, std::vector<std::shared_ptr<LRScheduler>>{warmup, cosine},
///                                               std::vector<int64_t>{500});
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(torch::optim::Optimizer& opt, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);
  std::string name() const override { return "SequentialLR"; }
  using LRScheduler::step;
  void step() override;
  void set_last_epoch(int64_t epoch) override;
  /// Adds the children's states (list "schedulers", in order).
  YAML::Node state_dict() const override;
  void load_state_dict(const YAML::Node& state) override;
  const std::vector<std::shared_ptr<LRScheduler>>& schedulers() const { return schedulers_; }
  const std::vector<int64_t>& milestones() const { return milestones_; }

 protected:
  std::vector<double> get_lr() override { return current_lrs(); }

 private:
  size_t index_of(int64_t epoch) const;  // bisect_right(milestones, epoch)
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

}  // namespace volt
