#include "volt/checkpoint/optimizer_state.h"

#include <torch/optim.h>

#include <algorithm>

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

namespace {
/// The state fields `optimizer` keeps, and its name for messages.
std::pair<std::vector<std::string>, const char*> fields_of(torch::optim::Optimizer& optimizer) {
  using namespace torch::optim;
  if (is<AdamOptions>(optimizer)) return {{"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}, "Adam"};
  if (is<AdamWOptions>(optimizer)) return {{"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}, "AdamW"};
  if (is<SGDOptions>(optimizer)) return {{"momentum_buffer"}, "SGD"};
  if (is<RMSpropOptions>(optimizer)) return {{"step", "square_avg", "momentum_buffer", "grad_avg"}, "RMSprop"};
  if (is<AdagradOptions>(optimizer)) return {{"step", "sum"}, "Adagrad"};
  return {{}, "this optimizer"};
}

/// A checkpoint holding state this optimizer does not keep was saved with another optimizer: its
/// state would be dropped without a word.
void check_fields(torch::optim::Optimizer& optimizer, const std::string& name,
                  const std::map<std::string, torch::Tensor>& state, const std::string& source) {
  const auto [fields, optimizer_name] = fields_of(optimizer);
  if (fields.empty()) return;  // unsupported: the caller says so
  for (const auto& f : optimizer_state_fields()) {
    if (!state.count(name + "." + f) || std::find(fields.begin(), fields.end(), f) != fields.end()) continue;
    throw CheckpointError(detail::str_cat(source, ": the optimizer state of '", name, "' has '", f, "', which ",
                                          optimizer_name,
                                          " does not keep: the checkpoint was saved with another "
                                          "optimizer. Resume with the same optimizer, or load the weights alone"));
  }
}
}  // namespace

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
      // As PyTorch's Optimizer.load_state_dict: floating state follows the parameter's dtype, so a
      // run resumed under another precision (32-true <-> bf16-true) steps with matching tensors.
      const torch::Tensor& v = it->second;
      return (v.is_floating_point() && p.is_floating_point() ? v.to(p.device(), p.scalar_type()) : v.to(p.device()))
          .clone();
    };
    auto step = [&]() -> int64_t {
      auto it = state.find(name + ".step");
      return it == state.end() ? 0 : it->second.item<int64_t>();
    };
    const bool has_any = state.count(name + ".step") || state.count(name + ".exp_avg") ||
                         state.count(name + ".momentum_buffer") || state.count(name + ".square_avg") ||
                         state.count(name + ".sum");
    if (!has_any) continue;
    check_fields(optimizer, name, state, source);
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

void for_each_optimizer_state(const OptimizerList& optimizers, const NamedTensors& params, const FieldFn& fn) {
  for (auto* o : optimizers) for_each_optimizer_state(*o, params, fn);
}

void optimizer_state_from_tensors(const OptimizerList& optimizers, const NamedTensors& params,
                                  const std::map<std::string, torch::Tensor>& state, const std::string& source) {
  if (optimizers.size() == 1) return optimizer_state_from_tensors(*optimizers[0], params, state, source);
  std::map<const c10::TensorImpl*, torch::optim::Optimizer*> owner;
  for (auto* o : optimizers)
    for (auto& g : o->param_groups())
      for (auto& p : g.params()) owner.emplace(p.unsafeGetTensorImpl(), o);
  for (const auto& np : params) {
    auto it = owner.find(np.second.unsafeGetTensorImpl());
    if (it != owner.end()) optimizer_state_from_tensors(*it->second, {np}, state, source);
  }
}

}  // namespace volt
