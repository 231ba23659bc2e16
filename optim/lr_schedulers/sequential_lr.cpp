#include "volt/optim/lr_schedulers/sequential_lr.h"

#include <algorithm>

#include "volt/core/errors.h"

namespace volt {

SequentialLR::SequentialLR(torch::optim::Optimizer& opt, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(opt), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  VOLT_CHECK(!schedulers_.empty(), ConfigError, "SequentialLR: schedulers is empty");
  VOLT_CHECK(milestones_.size() + 1 == schedulers_.size(), ConfigError, "SequentialLR: expected ",
             schedulers_.size() - 1, " milestones (one fewer than the ", schedulers_.size(), " schedulers), got ",
             milestones_.size());
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    const auto& s = schedulers_[i];
    VOLT_CHECK(s != nullptr, ConfigError, "SequentialLR: schedulers[", i, "] is null");
    VOLT_CHECK(&s->optimizer() == &opt, ConfigError, "SequentialLR: schedulers[", i, "] (", s->name(),
               ") belongs to another optimizer; build every scheduler on the optimizer given to SequentialLR");
    VOLT_CHECK(!s->needs_metric() && s->name() != "SequentialLR", ConfigError, "SequentialLR: schedulers[", i,
               "] is a ", s->name(), ", which cannot run inside SequentialLR");
  }
  for (size_t i = 0; i < milestones_.size(); ++i)
    VOLT_CHECK(milestones_[i] > (i == 0 ? 0 : milestones_[i - 1]), ConfigError,
               "SequentialLR: milestones must be > 0 and strictly increasing, got ", milestones_[i], " at index ", i);

  // PyTorch's constructor: the groups back at initial_lr (the lrs the first scheduler found), every
  // scheduler one position back, the first one's initial step again.
  base_lrs_ = schedulers_[0]->base_lrs_;
  for (const auto& s : schedulers_) {
    s->base_lrs_ = base_lrs_;
    s->last_epoch_ -= 1;
  }
  set_group_lrs(base_lrs_);
  last_epoch_ = 0;
  schedulers_[0]->initial_step();
}

size_t SequentialLR::index_of(int64_t epoch) const {
  return static_cast<size_t>(std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin());
}

void SequentialLR::step() {
  ++last_epoch_;
  const size_t idx = index_of(last_epoch_);
  LRScheduler& s = *schedulers_[idx];
  if (idx > 0 && milestones_[idx - 1] == last_epoch_)
    s.set_last_epoch(0);  // PyTorch's scheduler.step(0): the next scheduler from its own start
  else
    s.step();
}

void SequentialLR::set_last_epoch(int64_t epoch) {
  VOLT_CHECK(epoch >= 0, ConfigError, name(), ": set_last_epoch needs a position >= 0, got ", epoch);
  last_epoch_ = epoch;
  const size_t idx = index_of(epoch);
  schedulers_[idx]->set_last_epoch(idx == 0 ? epoch : epoch - milestones_[idx - 1]);
}

YAML::Node SequentialLR::state_dict() const {
  YAML::Node n = LRScheduler::state_dict();
  YAML::Node children(YAML::NodeType::Sequence);
  for (const auto& s : schedulers_) {
    YAML::Node c = s->state_dict();
    c["name"] = s->name();
    children.push_back(c);
  }
  n["schedulers"] = children;
  return n;
}

void SequentialLR::load_state_dict(const YAML::Node& state) {
  const YAML::Node children = state["schedulers"];
  if (children) {
    VOLT_CHECK(children.IsSequence() && children.size() == schedulers_.size(), CheckpointError,
               "SequentialLR: the checkpoint holds ", children.IsSequence() ? children.size() : 0,
               " schedulers, this run has ", schedulers_.size(), ": resume with the same schedulers");
    for (size_t i = 0; i < schedulers_.size(); ++i) {
      const YAML::Node c = children[i];
      const std::string saved = c["name"] ? c["name"].as<std::string>() : schedulers_[i]->name();
      VOLT_CHECK(saved == schedulers_[i]->name(), CheckpointError, "SequentialLR: schedulers[", i, "] is a ", saved,
                 " in the checkpoint, a ", schedulers_[i]->name(), " in this run: resume with the same schedulers");
      schedulers_[i]->load_state_dict(c);
    }
  }
  LRScheduler::load_state_dict(state);  // last_epoch, and the groups' lrs last (the older form: closed form)
}

}  // namespace volt
