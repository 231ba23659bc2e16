#include "volt/strategies/cuda_graphs/cuda_graphs.h"

#include <c10/core/InferenceMode.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include "volt/core/errors.h"

namespace volt::detail {

CudaGraphs::CudaGraphs(std::unique_ptr<GraphRecorder> recorder) : recorder_(std::move(recorder)) {}

namespace {
void collect_outermost(torch::nn::Module& m, const std::string& path,
                       std::vector<std::pair<std::string, HookedModule*>>& out) {
  if (auto* h = dynamic_cast<HookedModule*>(&m)) {
    out.emplace_back(path.empty() ? std::string("(root)") : path, h);
    return;
  }
  for (const auto& kv : m.named_children())
    collect_outermost(*kv.value(), path.empty() ? kv.key() : path + "." + kv.key(), out);
}
}  // namespace

size_t CudaGraphs::apply(torch::nn::Module& root) {
  std::vector<std::pair<std::string, HookedModule*>> picked;
  collect_outermost(root, "", picked);
  for (auto& [path, h] : picked) {
    if (h->has_interceptor(kName)) continue;
    h->add_interceptor(shared_from_this(), kPriority);
    index_[h] = modules_.size();
    modules_.push_back(PerModule{path, h->parameters()});
  }
  return picked.size();
}

void CudaGraphs::remove(torch::nn::Module& root) {
  if (auto* h = dynamic_cast<HookedModule*>(&root)) h->remove_interceptors(kName);
  for (const auto& m : root.modules(/*include_self=*/false))
    if (auto* h = dynamic_cast<HookedModule*>(m.get())) h->remove_interceptors(kName);
  modules_.clear();
  index_.clear();
}

CudaGraphs::Step::Step(CudaGraphs* graphs) : graphs_(graphs) {
  TORCH_INTERNAL_ASSERT(!graphs_->in_step_, "CudaGraphs::Step nested");
  graphs_->in_step_ = true;
  for (auto& m : graphs_->modules_) m.next_call = 0;
}

CudaGraphs::Step::~Step() {
  if (graphs_ != nullptr) graphs_->in_step_ = false;
}

torch::Tensor CudaGraphs::eager(PerModule& m, const TensorVec& inputs, const ForwardFn& next, std::string reason) {
  ++stats_.eager;
  if (m.eager_reason.empty()) {
    m.eager_reason = std::move(reason);
    spdlog::info("CUDA graphs: a call of '{}' ran eagerly: {}", m.name, m.eager_reason);
  }
  return next(inputs);
}

torch::Tensor CudaGraphs::around(torch::nn::Module& module, const TensorVec& inputs, const ForwardFn& next) {
  auto it = index_.find(&module);
  // Outside training steps (validation, predict, a forward of the user's own) nothing is graphed.
  if (it == index_.end() || !in_step_ || !torch::GradMode::is_enabled() || c10::InferenceMode::is_enabled() ||
      !module.is_training())
    return next(inputs);
  PerModule& m = modules_[it->second];
  bool needs_grad = false;
  for (const auto& t : inputs) needs_grad = needs_grad || (t.defined() && t.requires_grad());
  for (const auto& p : m.params) needs_grad = needs_grad || p.requires_grad();
  if (!needs_grad) return next(inputs);  // nothing to backward: a frozen module on frozen inputs
  const size_t k = m.next_call++;
  if (k == m.calls.size()) {
    auto call = std::make_shared<GraphedCall>(module, k == 0 ? m.name : detail::str_cat(m.name, " (call ", k + 1, ")"),
                                              m.params, *recorder_);
    call->capture(inputs, next);
    m.calls.push_back(std::move(call));
    ++stats_.captured;
  }
  GraphedCall& call = *m.calls[k];
  const CallSignature now = call.signature_of(inputs);
  if (!(now == call.signature()))
    return eager(m, inputs, next,
                 detail::str_cat("call ", k + 1, " of the step differs from the captured one (",
                                 call.signature().difference(now),
                                 "); graphs need static shapes (drop_last: true keeps batches whole)"));
  ++stats_.replayed;
  return call.run(inputs);
}

std::string CudaGraphs::summary() const {
  std::string s =
      detail::str_cat("CUDA graphs (", recorder_->kind(), ") on ", modules_.size(), " module(s): ", stats_.captured,
                      " call(s) captured, ", stats_.replayed, " replayed, ", stats_.eager, " ran eagerly");
  for (const auto& m : modules_)
    if (!m.eager_reason.empty()) s += detail::str_cat("; '", m.name, "': ", m.eager_reason);
  return s;
}

}  // namespace volt::detail
