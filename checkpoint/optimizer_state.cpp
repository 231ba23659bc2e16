#include "volt/checkpoint/optimizer_state.h"

#include <torch/optim.h>

#include "volt/core/compat.h"
#include "volt/core/errors.h"

namespace volt {

namespace {

torch::Tensor step_tensor(int64_t s) { return torch::tensor(s, torch::kLong); }

using FieldFn = std::function<void(const std::string&, const std::string&, const torch::Tensor&)>;

// Calls fn for each field of a param state; returns false for an unknown type.
bool visit_state(const torch::optim::OptimizerParamState& st, const std::string& n, const FieldFn& fn) {
  auto put = [&](const char* f, const torch::Tensor& t) {
    if (t.defined()) fn(n, f, t.detach());
  };
  auto step = [&](int64_t s) { fn(n, "step", step_tensor(s)); };
  using namespace torch::optim;
  if (auto* a = dynamic_cast<const AdamParamState*>(&st)) {
    step(a->step());
    put("exp_avg", a->exp_avg());
    put("exp_avg_sq", a->exp_avg_sq());
    put("max_exp_avg_sq", a->max_exp_avg_sq());
  } else if (auto* w = dynamic_cast<const AdamWParamState*>(&st)) {
    step(w->step());
    put("exp_avg", w->exp_avg());
    put("exp_avg_sq", w->exp_avg_sq());
    put("max_exp_avg_sq", w->max_exp_avg_sq());
  } else if (auto* s = dynamic_cast<const SGDParamState*>(&st)) {
    put("momentum_buffer", s->momentum_buffer());
  } else if (auto* r = dynamic_cast<const RMSpropParamState*>(&st)) {
    step(r->step());
    put("square_avg", r->square_avg());
    put("momentum_buffer", r->momentum_buffer());
    put("grad_avg", r->grad_avg());
  } else if (auto* g = dynamic_cast<const AdagradParamState*>(&st)) {
    step(g->step());
    put("sum", g->sum());
  } else {
    return false;
  }
  return true;
}

template <class Options>
bool is(const torch::optim::Optimizer& o) {
  return !o.param_groups().empty() && dynamic_cast<const Options*>(&o.param_groups()[0].options()) != nullptr;
}

}  // namespace

void for_each_optimizer_state(torch::optim::Optimizer& optimizer, const NamedTensors& params, const FieldFn& fn) {
  auto& state = optimizer.state();
  for (const auto& [name, p] : params) {
    auto it = state.find(compat::optimizer_state_key(p));
    if (it == state.end()) continue;
    VOLT_CHECK(visit_state(*it->second, name, fn), CheckpointError,
               "cannot checkpoint this optimizer's state: volt saves Adam, AdamW, SGD, RMSprop and Adagrad");
  }
}

std::map<std::string, torch::Tensor> optimizer_state_to_tensors(torch::optim::Optimizer& optimizer,
                                                                const NamedTensors& params) {
  std::map<std::string, torch::Tensor> out;
  for_each_optimizer_state(optimizer, params, [&](const std::string& n, const std::string& f, const torch::Tensor& t) {
    out[n + "." + f] = t.clone();
  });
  return out;
}

void optimizer_state_from_tensors(torch::optim::Optimizer& optimizer, const NamedTensors& params,
                                  const std::map<std::string, torch::Tensor>& state, const std::string& source) {
  using namespace torch::optim;
  auto& st = optimizer.state();
  for (const auto& [name, p] : params) {
    auto get = [&](const char* f) -> torch::Tensor {
      auto it = state.find(name + "." + f);
      if (it == state.end()) return {};
      VOLT_CHECK(it->second.sizes() == p.sizes(), CheckpointError, source, ": optimizer state '", name, ".", f,
                 "' has shape ", it->second.sizes(), " but the parameter has ", p.sizes(),
                 " (a checkpoint from another model or world size?)");
      return it->second.to(p.device()).clone();
    };
    auto step = [&]() -> int64_t {
      auto it = state.find(name + ".step");
      return it == state.end() ? 0 : it->second.item<int64_t>();
    };
    const bool has_any = state.count(name + ".step") || state.count(name + ".exp_avg") ||
                         state.count(name + ".momentum_buffer") || state.count(name + ".square_avg") ||
                         state.count(name + ".sum");
    if (!has_any) continue;
    const auto key = compat::optimizer_state_key(p);
    if (is<AdamOptions>(optimizer)) {
      auto s = std::make_unique<AdamParamState>();
      s->step(step()).exp_avg(get("exp_avg")).exp_avg_sq(get("exp_avg_sq")).max_exp_avg_sq(get("max_exp_avg_sq"));
      st[key] = std::move(s);
    } else if (is<AdamWOptions>(optimizer)) {
      auto s = std::make_unique<AdamWParamState>();
      s->step(step()).exp_avg(get("exp_avg")).exp_avg_sq(get("exp_avg_sq")).max_exp_avg_sq(get("max_exp_avg_sq"));
      st[key] = std::move(s);
    } else if (is<SGDOptions>(optimizer)) {
      auto s = std::make_unique<SGDParamState>();
      s->momentum_buffer(get("momentum_buffer"));
      st[key] = std::move(s);
    } else if (is<RMSpropOptions>(optimizer)) {
      auto s = std::make_unique<RMSpropParamState>();
      s->step(step()).square_avg(get("square_avg")).momentum_buffer(get("momentum_buffer")).grad_avg(get("grad_avg"));
      st[key] = std::move(s);
    } else if (is<AdagradOptions>(optimizer)) {
      auto s = std::make_unique<AdagradParamState>();
      s->step(step()).sum(get("sum"));
      st[key] = std::move(s);
    } else {
      throw CheckpointError(
          source + ": cannot restore this optimizer's state: volt restores Adam, AdamW, SGD, RMSprop and Adagrad");
    }
  }
}

}  // namespace volt
