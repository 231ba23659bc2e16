#include "volt/optim/lr_schedulers/lr_scheduler_base.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "volt/core/errors.h"

namespace volt {

LRScheduler::LRScheduler(torch::optim::Optimizer& optimizer) : optimizer_(&optimizer) {
  VOLT_CHECK(!optimizer.param_groups().empty(), ConfigError, "LR scheduler: the optimizer has no param groups");
  for (auto& g : optimizer_->param_groups()) base_lrs_.push_back(g.options().get_lr());
}

void LRScheduler::initial_step() {
  last_epoch_ = -1;
  step();
}

void LRScheduler::step() {
  ++last_epoch_;
  set_group_lrs(get_lr());
}

void LRScheduler::step(double /*metric*/) { step(); }

void LRScheduler::set_last_epoch(int64_t epoch) {
  VOLT_CHECK(epoch >= 0, ConfigError, name(), ": set_last_epoch needs a position >= 0, got ", epoch);
  last_epoch_ = epoch;
  set_group_lrs(closed_form_lr());
}

size_t LRScheduler::num_groups() const { return optimizer_->param_groups().size(); }

void LRScheduler::set_group_lrs(const std::vector<double>& lrs) {
  auto& groups = optimizer_->param_groups();
  VOLT_CHECK(groups.size() == lrs.size() && groups.size() == base_lrs_.size(), ConfigError, name(),
             ": the optimizer has ", groups.size(), " param groups, the scheduler was built for ", base_lrs_.size(),
             ": build the scheduler after adding every param group");
  for (size_t i = 0; i < groups.size(); ++i) groups[i].options().set_lr(lrs[i]);
}

std::vector<double> LRScheduler::current_lrs() const {
  std::vector<double> out;
  for (auto& g : optimizer_->param_groups()) out.push_back(g.options().get_lr());
  return out;
}

YAML::Node LRScheduler::state_dict() const {
  YAML::Node n(YAML::NodeType::Map);
  n["last_epoch"] = last_epoch_;
  n["base_lrs"] = detail::encode_doubles(base_lrs_);
  n["last_lrs"] = detail::encode_doubles(current_lrs());
  return n;
}

void LRScheduler::load_state_dict(const YAML::Node& state) {
  VOLT_CHECK(state && state.IsMap(), CheckpointError, name(), ": the saved scheduler state is not a map");
  const int64_t epoch = detail::decode_int(state, "last_epoch", name());
  if (state["base_lrs"]) base_lrs_ = detail::decode_doubles(state["base_lrs"], num_groups(), name() + ".base_lrs");
  if (state["last_lrs"]) {
    last_epoch_ = epoch;
    set_group_lrs(detail::decode_doubles(state["last_lrs"], num_groups(), name() + ".last_lrs"));
  } else {
    set_last_epoch(epoch);  // the older {name, last_epoch} state
  }
}

namespace detail {

YAML::Node encode_double(double v) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return YAML::Node(std::string(buf));
}

double decode_double(const YAML::Node& n, const std::string& what) {
  VOLT_CHECK(n && n.IsScalar(), CheckpointError, "scheduler state '", what, "': expected a number");
  std::string s = n.Scalar();
  if (s == ".inf" || s == ".Inf" || s == "+.inf") s = "inf";
  if (s == "-.inf" || s == "-.Inf") s = "-inf";
  if (s == ".nan" || s == ".NaN") s = "nan";
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  VOLT_CHECK(!s.empty() && end == s.c_str() + s.size() && errno != ERANGE, CheckpointError, "scheduler state '", what,
             "': '", n.Scalar(), "' is not a number");
  return v;
}

YAML::Node encode_doubles(const std::vector<double>& v) {
  YAML::Node n(YAML::NodeType::Sequence);
  for (double x : v) n.push_back(encode_double(x));
  return n;
}

std::vector<double> decode_doubles(const YAML::Node& n, size_t expected, const std::string& what) {
  VOLT_CHECK(n && n.IsSequence() && n.size() == expected, CheckpointError, "scheduler state '", what,
             "': expected a list of ", expected, " numbers (one per param group): resume with the same param groups");
  std::vector<double> out;
  for (size_t i = 0; i < n.size(); ++i) out.push_back(decode_double(n[i], what));
  return out;
}

int64_t decode_int(const YAML::Node& state, const std::string& key, const std::string& scheduler) {
  VOLT_CHECK(state && state.IsMap(), CheckpointError, scheduler, ": the saved scheduler state is not a map");
  const YAML::Node n = state[key];
  VOLT_CHECK(n && n.IsScalar(), CheckpointError, scheduler, ": the saved scheduler state lacks '", key, "'");
  try {
    return n.as<int64_t>();
  } catch (const YAML::Exception&) {
    throw CheckpointError(
        str_cat(scheduler, ": the saved scheduler state's '", key, "' is not an integer: '", n.Scalar(), "'"));
  }
}

std::vector<double> per_group(const std::vector<double>& v, size_t groups, const std::string& what) {
  VOLT_CHECK(v.size() == 1 || v.size() == groups, ConfigError, what, ": expected one value (for every param group) or ",
             groups, " (one per param group), got ", v.size());
  return v.size() == 1 ? std::vector<double>(groups, v[0]) : v;
}

}  // namespace detail
}  // namespace volt
