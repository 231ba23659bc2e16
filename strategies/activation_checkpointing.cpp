#include "volt/strategies/activation_checkpointing.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/torch.h>

#include <unordered_set>
#include <vector>

#include "volt/core/compat.h"
#include "volt/core/errors.h"
#include "volt/strategies/module_policy.h"
#include "volt/strategies/rng_snapshot.h"

namespace volt {

namespace {

using detail::RngSnapshot;

/// The leaves the recomputed graph reaches besides `known` (the detached inputs and the module's
/// parameters): tensors the forward read from elsewhere (another module's weight through a pointer,
/// an unregistered member). This node has no edge to them, so their gradients are accumulated
/// here, as a nested backward did before (see [Note: one gradient arrival a parameter]).
TensorVec other_leaves(const torch::Tensor& out, const std::unordered_set<const c10::TensorImpl*>& known) {
  TensorVec found;
  std::unordered_set<const torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> stack;
  if (out.grad_fn()) stack.push_back(out.grad_fn().get());
  while (!stack.empty()) {
    torch::autograd::Node* n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second) continue;
    if (auto* acc = dynamic_cast<torch::autograd::AccumulateGrad*>(n)) {
      if (!known.count(acc->variable.unsafeGetTensorImpl())) found.push_back(acc->variable);
      continue;
    }
    for (const auto& e : n->next_edges())
      if (e.function) stack.push_back(e.function.get());
  }
  return found;
}

class CheckpointBackward : public torch::autograd::Node {
 public:
  CheckpointBackward(ForwardFn fn, TensorVec inputs, TensorVec params, RngSnapshot rng, compat::AutocastState autocast,
                     std::string module_name)
      : fn_(std::move(fn)),
        inputs_(std::move(inputs)),
        params_(std::move(params)),
        rng_(std::move(rng)),
        autocast_(autocast),
        module_name_(std::move(module_name)) {
    for (const auto& t : inputs_) versions_.push_back(t.defined() ? t._version() : 0);
  }
  std::string name() const override { return "ActivationCheckpointBackward"; }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    VOLT_CHECK(fn_ != nullptr, ConfigError, "activation checkpointing of '", module_name_,
               "': backward ran twice through the same forward (retain_graph is not supported with checkpointing)");
    // Grad mode is on inside a backward only with create_graph: the gradients below would carry no
    // history, and a second-order gradient through them would be silently wrong.
    VOLT_CHECK(!torch::GradMode::is_enabled(), ConfigError, "activation checkpointing of '", module_name_,
               "': backward with create_graph (a double backward) is not supported; checkpoint no module on "
               "that path");
    for (size_t i = 0; i < inputs_.size(); ++i)
      VOLT_CHECK(!inputs_[i].defined() || inputs_[i]._version() == versions_[i], ConfigError,
                 "activation checkpointing of '", module_name_, "': input ", i,
                 " was modified in place after the forward; the recomputation would differ");
    torch::autograd::variable_list result(inputs_.size() + params_.size());
    if (grads.empty() || !grads[0].defined()) {
      release();
      return result;
    }
    TensorVec x;
    for (const auto& t : inputs_) {
      if (!t.defined()) {
        x.push_back(t);
        continue;
      }
      torch::Tensor d = t.detach();
      d.requires_grad_(t.requires_grad());
      x.push_back(d);
    }
    // Recompute with the forward's RNG and autocast; put this thread's own back afterwards.
    RngSnapshot current = rng_.now();
    const auto autocast_now = compat::AutocastState::capture();
    rng_.restore();
    autocast_.apply();
    torch::Tensor out;
    try {
      torch::AutoGradMode grad(true);
      out = fn_(x);
    } catch (...) {
      autocast_now.apply();
      current.restore();
      throw;
    }
    if (autocast_.cpu || autocast_.cuda) compat::clear_autocast_cache();
    autocast_now.apply();
    current.restore();
    // [Note: one gradient arrival a parameter] The parameters' gradients are this node's outputs,
    // not accumulated here (as a nested backward would): the outer backward sums every use of a
    // parameter (a module checkpointed and called twice, a weight tied to one used outside) and
    // runs its AccumulateGrad once. FSDP and DDP take that arrival as "this gradient is complete";
    // a second one came after FSDP had reduced and freed the unit (a lost gradient, or a
    // recomputation reading freed storage).
    TensorVec wrt;
    std::vector<size_t> slot;
    for (size_t i = 0; i < x.size(); ++i)
      if (x[i].defined() && x[i].requires_grad()) {
        wrt.push_back(x[i]);
        slot.push_back(i);
      }
    for (size_t j = 0; j < params_.size(); ++j) {
      if (!params_[j].requires_grad()) continue;  // frozen since the forward
      wrt.push_back(params_[j]);
      slot.push_back(inputs_.size() + j);
    }
    if (out.requires_grad()) {
      std::unordered_set<const c10::TensorImpl*> known;
      for (const auto& t : wrt) known.insert(t.unsafeGetTensorImpl());
      const TensorVec others = other_leaves(out, known);
      if (!wrt.empty()) {
        const auto g = torch::autograd::grad({out}, wrt, {grads[0]}, /*retain_graph=*/!others.empty(),
                                             /*create_graph=*/false, /*allow_unused=*/true);
        for (size_t k = 0; k < g.size(); ++k) result[slot[k]] = g[k];
      }
      if (!others.empty()) torch::autograd::backward({out}, {grads[0]}, /*retain_graph=*/false, false, others);
    }
    release();
    return result;
  }

 private:
  void release() {
    fn_ = nullptr;
    inputs_.clear();
    params_.clear();
  }
  ForwardFn fn_;
  TensorVec inputs_;
  TensorVec params_;  // the module's parameters that require grad, each once
  std::vector<int64_t> versions_;
  RngSnapshot rng_;
  compat::AutocastState autocast_;
  std::string module_name_;
};

}  // namespace

torch::Tensor ActivationCheckpointing::around(torch::nn::Module& module, const TensorVec& inputs,
                                              const ForwardFn& next) {
  if (!torch::GradMode::is_enabled()) return next(inputs);
  TensorVec params;
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const auto& p : module.parameters())
    if (p.requires_grad() && seen.insert(p.unsafeGetTensorImpl()).second) params.push_back(p);
  bool needs_grad = !params.empty();
  for (const auto& t : inputs) needs_grad = needs_grad || (t.defined() && t.requires_grad());
  if (!needs_grad) return next(inputs);

  RngSnapshot rng = RngSnapshot::capture(inputs);
  const auto autocast = compat::AutocastState::capture();
  torch::Tensor out;
  {
    // No graph, so no activations kept. Autocast's weight-cast cache stays off meanwhile: a cast
    // cached here would carry no autograd history, and the recomputation would reuse it and
    // leave the weight without a gradient.
    torch::NoGradGuard no_grad;
    const bool cache = at::autocast::is_autocast_cache_enabled();
    at::autocast::set_autocast_cache_enabled(false);
    try {
      out = next(inputs);
    } catch (...) {
      at::autocast::set_autocast_cache_enabled(cache);
      throw;
    }
    at::autocast::set_autocast_cache_enabled(cache);
  }
  if (out.is_view()) out = out.clone();  // the node must own a fresh output, not a view of an input
  auto edges = torch::autograd::collect_next_edges(inputs);
  for (const auto& e : torch::autograd::collect_next_edges(params)) edges.push_back(e);
  std::shared_ptr<CheckpointBackward> node(
      new CheckpointBackward(next, inputs, std::move(params), std::move(rng), autocast, module.name()),
      torch::autograd::deleteNode);
  node->set_next_edges(std::move(edges));
  torch::autograd::create_gradient_edge(out, node);
  return out;
}

size_t apply_activation_checkpointing(torch::nn::Module& root, const ModulePolicy& policy,
                                      const std::string& config_key) {
  policy.validate(config_key, /*checkpointing=*/true);
  const auto picked = select_modules(root, policy, config_key, "activation checkpointing");
  const auto n = static_cast<size_t>(policy.every_n_modules);
  VOLT_CHECK(picked.empty() || n <= picked.size(), ConfigError, "config key '", config_key, ".every_n_modules': ", n,
             ", but the policy selects ", picked.size(), picked.size() == 1 ? " module" : " modules",
             ", so none would be checkpointed; use at most ", picked.size());
  auto interceptor = std::make_shared<ActivationCheckpointing>();
  size_t installed = 0;
  for (size_t i = n - 1; i < picked.size(); i += n) {
    auto* h = dynamic_cast<HookedModule*>(picked[i].second);
    if (!h->has_interceptor(ActivationCheckpointing::kName))
      h->add_interceptor(interceptor, ActivationCheckpointing::kPriority);
    ++installed;
  }
  return installed;
}

size_t remove_activation_checkpointing(torch::nn::Module& root) {
  size_t n = 0;
  // modules(include_self=true) would need `root` to be held by a shared_ptr; a module on the stack is fine here.
  if (auto* h = dynamic_cast<HookedModule*>(&root)) n += h->remove_interceptors(ActivationCheckpointing::kName);
  for (const auto& m : root.modules(/*include_self=*/false))
    if (auto* h = dynamic_cast<HookedModule*>(m.get())) n += h->remove_interceptors(ActivationCheckpointing::kName);
  return n;
}

}  // namespace volt
