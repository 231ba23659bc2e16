// Param-group hyper-parameters of LibTorch's optimizers to and from YAML.
#include "volt/checkpoint/optimizer_hparams.h"

#include <torch/optim.h>

#include <functional>

#include "volt/core/errors.h"

namespace volt {

namespace {

using namespace torch::optim;

/// Visits every hyper-parameter of one param group's options as (name, double&) or (name, bool&):
/// `visit` reads them to save and writes them to load, so both directions list each field once.
template <class Fn>
bool visit_options(OptimizerOptions& o, Fn&& fn) {
  auto d = [&](const char* n, double get, const std::function<void(double)>& set) { fn(n, get, set); };
  if (auto* a = dynamic_cast<AdamOptions*>(&o)) {
    d("lr", a->lr(), [a](double v) { a->lr(v); });
    d("beta1", std::get<0>(a->betas()), [a](double v) { a->betas({v, std::get<1>(a->betas())}); });
    d("beta2", std::get<1>(a->betas()), [a](double v) { a->betas({std::get<0>(a->betas()), v}); });
    d("eps", a->eps(), [a](double v) { a->eps(v); });
    d("weight_decay", a->weight_decay(), [a](double v) { a->weight_decay(v); });
    d("amsgrad", a->amsgrad(), [a](double v) { a->amsgrad(v != 0); });
  } else if (auto* w = dynamic_cast<AdamWOptions*>(&o)) {
    d("lr", w->lr(), [w](double v) { w->lr(v); });
    d("beta1", std::get<0>(w->betas()), [w](double v) { w->betas({v, std::get<1>(w->betas())}); });
    d("beta2", std::get<1>(w->betas()), [w](double v) { w->betas({std::get<0>(w->betas()), v}); });
    d("eps", w->eps(), [w](double v) { w->eps(v); });
    d("weight_decay", w->weight_decay(), [w](double v) { w->weight_decay(v); });
    d("amsgrad", w->amsgrad(), [w](double v) { w->amsgrad(v != 0); });
  } else if (auto* s = dynamic_cast<SGDOptions*>(&o)) {
    d("lr", s->lr(), [s](double v) { s->lr(v); });
    d("momentum", s->momentum(), [s](double v) { s->momentum(v); });
    d("dampening", s->dampening(), [s](double v) { s->dampening(v); });
    d("weight_decay", s->weight_decay(), [s](double v) { s->weight_decay(v); });
    d("nesterov", s->nesterov(), [s](double v) { s->nesterov(v != 0); });
  } else if (auto* r = dynamic_cast<RMSpropOptions*>(&o)) {
    d("lr", r->lr(), [r](double v) { r->lr(v); });
    d("alpha", r->alpha(), [r](double v) { r->alpha(v); });
    d("eps", r->eps(), [r](double v) { r->eps(v); });
    d("weight_decay", r->weight_decay(), [r](double v) { r->weight_decay(v); });
    d("momentum", r->momentum(), [r](double v) { r->momentum(v); });
    d("centered", r->centered(), [r](double v) { r->centered(v != 0); });
  } else if (auto* g = dynamic_cast<AdagradOptions*>(&o)) {
    d("lr", g->lr(), [g](double v) { g->lr(v); });
    d("lr_decay", g->lr_decay(), [g](double v) { g->lr_decay(v); });
    d("weight_decay", g->weight_decay(), [g](double v) { g->weight_decay(v); });
    d("initial_accumulator_value", g->initial_accumulator_value(), [g](double v) { g->initial_accumulator_value(v); });
    d("eps", g->eps(), [g](double v) { g->eps(v); });
  } else {
    return false;
  }
  return true;
}

OptimizerOptions& group_options(const torch::optim::Optimizer& opt, size_t i) {
  // param_groups() is const-qualified only on the vector: the options are the optimizer's own.
  return const_cast<OptimizerOptions&>(opt.param_groups()[i].options());
}

}  // namespace

std::string optimizer_type_name(const torch::optim::Optimizer& optimizer) {
  if (optimizer.param_groups().empty()) return "";
  const OptimizerOptions* o = &optimizer.param_groups()[0].options();
  if (dynamic_cast<const AdamOptions*>(o)) return "Adam";
  if (dynamic_cast<const AdamWOptions*>(o)) return "AdamW";
  if (dynamic_cast<const SGDOptions*>(o)) return "SGD";
  if (dynamic_cast<const RMSpropOptions*>(o)) return "RMSprop";
  if (dynamic_cast<const AdagradOptions*>(o)) return "Adagrad";
  return "";
}

YAML::Node optimizer_hparams(const torch::optim::Optimizer& optimizer) {
  YAML::Node n(YAML::NodeType::Map);
  n["type"] = optimizer_type_name(optimizer);
  YAML::Node groups(YAML::NodeType::Sequence);
  for (size_t i = 0; i < optimizer.param_groups().size(); ++i) {
    YAML::Node g(YAML::NodeType::Map);
    const bool known = visit_options(group_options(optimizer, i), [&](const char* name, double v, const auto&) {
      g[name] = detail::str_cat(std::setprecision(17), v);
    });
    VOLT_CHECK(known, CheckpointError,
               "cannot checkpoint this optimizer's hyper-parameters: volt saves Adam, AdamW, SGD, RMSprop and "
               "Adagrad");
    groups.push_back(g);
  }
  n["param_groups"] = groups;
  return n;
}

void load_optimizer_hparams(torch::optim::Optimizer& optimizer, const YAML::Node& hparams, const std::string& source) {
  const std::string type = optimizer_type_name(optimizer);
  const std::string saved = hparams["type"] ? hparams["type"].as<std::string>() : std::string("?");
  VOLT_CHECK(saved == type, CheckpointError, source, ": the checkpoint's optimizer is ", saved, ", this run's is ",
             type.empty() ? std::string("another type") : type,
             ". Resume with the same optimizer, or load the weights alone");
  const YAML::Node groups = hparams["param_groups"];
  const size_t n = optimizer.param_groups().size();
  VOLT_CHECK(groups && groups.IsSequence() && groups.size() == n, CheckpointError, source, ": the checkpoint's ", type,
             " has ", groups && groups.IsSequence() ? groups.size() : 0, " param group(s), this run's ", n,
             ". Resume with the same configure_optimizers, or load the weights alone");
  for (size_t i = 0; i < n; ++i) {
    visit_options(group_options(optimizer, i), [&](const char* name, double, const auto& set) {
      const YAML::Node v = groups[i][name];
      VOLT_CHECK(v.IsDefined(), CheckpointError, source, ": param group ", i, " of the checkpoint's ", type, " lacks '",
                 name, "'");
      set(std::stod(v.as<std::string>()));
    });
  }
}

}  // namespace volt
