#include "volt/strategies/cuda_graphs/graphed_call.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/torch.h>

#include <sstream>
#include <unordered_set>

#include "volt/core/errors.h"
#include "volt/strategies/rng_snapshot.h"

namespace volt::detail {

// ---- signature ----------------------------------------------------------------------------------

CallSignature CallSignature::of(const TensorVec& inputs, const std::vector<torch::Tensor>& params) {
  CallSignature s;
  for (const auto& t : inputs) {
    Input in;
    in.defined = t.defined();
    if (in.defined) {
      in.requires_grad = t.requires_grad();
      in.sizes = t.sizes().vec();
      in.strides = t.strides().vec();
      in.dtype = t.scalar_type();
      in.device = t.device();
    }
    s.inputs.push_back(std::move(in));
  }
  for (const auto& p : params) s.params_requiring_grad.push_back(p.requires_grad());
  const auto a = compat::AutocastState::capture();
  s.autocast_cpu = a.cpu;
  s.autocast_cuda = a.cuda;
  s.autocast_cpu_dtype = a.cpu_dtype;
  s.autocast_cuda_dtype = a.cuda_dtype;
  return s;
}

bool CallSignature::operator==(const CallSignature& o) const {
  return inputs == o.inputs && params_requiring_grad == o.params_requiring_grad && autocast_cpu == o.autocast_cpu &&
         autocast_cuda == o.autocast_cuda && (!autocast_cpu || autocast_cpu_dtype == o.autocast_cpu_dtype) &&
         (!autocast_cuda || autocast_cuda_dtype == o.autocast_cuda_dtype);
}

namespace {
std::string describe(const CallSignature::Input& in) {
  if (!in.defined) return "none";
  std::ostringstream os;
  os << c10::IntArrayRef(in.sizes) << " " << in.dtype << " on " << in.device;
  if (in.requires_grad) os << " requiring grad";
  return os.str();
}
}  // namespace

std::string CallSignature::difference(const CallSignature& now) const {
  if (inputs.size() != now.inputs.size())
    return detail::str_cat(inputs.size(), " inputs -> ", now.inputs.size(), " inputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == now.inputs[i]) continue;
    CallSignature::Input same_shape = now.inputs[i];
    same_shape.sizes = inputs[i].sizes;
    same_shape.strides = inputs[i].strides;
    if (inputs[i].defined && now.inputs[i].defined && same_shape == inputs[i])  // only the shape or strides
      return inputs[i].sizes != now.inputs[i].sizes
                 ? detail::str_cat("input ", i, ": shape ", c10::IntArrayRef(inputs[i].sizes), " -> ",
                                   c10::IntArrayRef(now.inputs[i].sizes))
                 : detail::str_cat("input ", i, ": strides ", c10::IntArrayRef(inputs[i].strides), " -> ",
                                   c10::IntArrayRef(now.inputs[i].strides));
    return detail::str_cat("input ", i, ": ", describe(inputs[i]), " -> ", describe(now.inputs[i]));
  }
  if (params_requiring_grad != now.params_requiring_grad) return "parameters frozen or unfrozen";
  return "autocast turned on, off or to another dtype";
}

// ---- the output's autograd node -----------------------------------------------------------------

namespace {
class GraphedBackward : public torch::autograd::Node {
 public:
  GraphedBackward(std::shared_ptr<GraphedCall> call, uint64_t generation)
      : call_(std::move(call)), generation_(generation) {}
  std::string name() const override { return "CudaGraphedBackward"; }
  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    return call_->replay_backward(grads.empty() ? torch::Tensor() : grads[0], generation_);
  }

 private:
  std::shared_ptr<GraphedCall> call_;
  uint64_t generation_;
};

/// Puts back, when it goes, what warm-up and capture must not change: the generators, the
/// module's buffers and autocast's weight-cast cache.
class CaptureScope {
 public:
  CaptureScope(torch::nn::Module& module, const std::vector<torch::Tensor>& on_devices)
      : rng_(RngSnapshot::capture(on_devices)), cache_(at::autocast::is_autocast_cache_enabled()) {
    torch::NoGradGuard ng;
    for (auto& b : module.buffers()) buffers_.emplace_back(b, b.clone());
    // A cast cached during capture would live in the graph's memory; one cached before would be
    // read by the graph as a constant.
    compat::clear_autocast_cache();
    at::autocast::set_autocast_cache_enabled(false);
  }
  ~CaptureScope() {
    at::autocast::set_autocast_cache_enabled(cache_);
    torch::NoGradGuard ng;
    for (auto& [b, saved] : buffers_) b.copy_(saved);
    rng_.restore();
  }
  CaptureScope(const CaptureScope&) = delete;
  CaptureScope& operator=(const CaptureScope&) = delete;

 private:
  RngSnapshot rng_;
  bool cache_;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> buffers_;
};
}  // namespace

// ---- the call -----------------------------------------------------------------------------------

GraphedCall::GraphedCall(torch::nn::Module& module, std::string name, std::vector<torch::Tensor> params,
                         GraphRecorder& recorder)
    : module_(module), name_(std::move(name)), all_params_(std::move(params)), recorder_(recorder) {}

CallSignature GraphedCall::signature_of(const TensorVec& inputs) const {
  return CallSignature::of(inputs, all_params_);
}

void GraphedCall::capture(const TensorVec& inputs, ForwardFn next) {
  TORCH_INTERNAL_ASSERT(!captured(), "GraphedCall captured twice");
  signature_ = signature_of(inputs);
  next_ = std::move(next);
  for (const auto& kv : module_.named_parameters()) {
    if (!kv.value().requires_grad()) continue;
    params_.push_back(kv.value());
    param_names_.push_back(kv.key());
    param_ptrs_.push_back(kv.value().data_ptr());
  }
  for (const auto& t : inputs) {
    if (!t.defined()) {
      static_in_.emplace_back();
      continue;
    }
    torch::Tensor s = t.detach().clone();
    if (t.requires_grad()) {
      s.requires_grad_(true);
      grad_targets_.push_back(s);
    }
    static_in_.push_back(s);
  }
  grad_targets_.insert(grad_targets_.end(), params_.begin(), params_.end());
  std::vector<torch::Tensor> on_devices = inputs;
  on_devices.insert(on_devices.end(), params_.begin(), params_.end());
  const std::string what = detail::str_cat("config key 'trainer.cuda_graph': module '", name_, "' (", module_.name(),
                                           ") could not be captured: ");
  try {
    CaptureScope scope(module_, on_devices);
    recorder_.warm_up([&] {
      for (int k = 0; k < kWarmupIterations; ++k) {
        torch::Tensor out = next_(static_in_);
        if (out.defined() && out.requires_grad())
          torch::autograd::grad({out}, grad_targets_, {torch::ones_like(out)}, /*retain_graph=*/false,
                                /*create_graph=*/false, /*allow_unused=*/true);
      }
    });
    fwd_ = recorder_.record([this] { static_out_ = next_(static_in_); }, nullptr);
    VOLT_CHECK(static_out_.defined() && static_out_.requires_grad(), ConfigError, what,
               "its output does not require grad although its parameters or inputs do (does the forward detach "
               "it?). Turn trainer.cuda_graph off");
    check_reads_only_its_own(module_);
    static_grad_out_ = torch::zeros_like(static_out_);
    bwd_ = recorder_.record(
        [this] {
          static_grads_ = torch::autograd::grad({static_out_}, grad_targets_, {static_grad_out_},
                                                /*retain_graph=*/true, /*create_graph=*/false, /*allow_unused=*/true);
        },
        fwd_.get());
  } catch (const ConfigError&) {
    fwd_.reset();
    throw;
  } catch (const std::exception& e) {
    fwd_.reset();
    throw ConfigError(detail::str_cat(what, e.what(), ". Turn trainer.cuda_graph off"));
  }
}

void GraphedCall::check_reads_only_its_own(const torch::nn::Module& module) const {
  // A tensor requiring grad that the body reads but the graph does not list would get no gradient
  // at all: training would silently differ from eager. Leaves reachable from the output must be
  // static inputs or the module's own parameters.
  std::unordered_set<const c10::TensorImpl*> mine;
  for (const auto& t : grad_targets_) mine.insert(t.unsafeGetTensorImpl());
  std::unordered_set<const torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> todo{static_out_.grad_fn().get()};
  while (!todo.empty()) {
    torch::autograd::Node* n = todo.back();
    todo.pop_back();
    if (n == nullptr || !seen.insert(n).second) continue;
    if (auto* acc = dynamic_cast<torch::autograd::AccumulateGrad*>(n)) {
      const torch::Tensor& v = acc->variable;
      VOLT_CHECK(!v.defined() || mine.count(v.unsafeGetTensorImpl()), ConfigError,
                 "config key 'trainer.cuda_graph': ", "module '", name_, "' (", module.name(),
                 ") reads a tensor that requires grad of shape ", v.sizes(),
                 " which is neither one of its inputs nor one of its own parameters (a parameter of another module, "
                 "or a tensor kept from elsewhere); its graph would give it no gradient. Pass it as an input, or "
                 "turn trainer.cuda_graph off");
      continue;
    }
    for (const auto& e : n->next_edges()) todo.push_back(e.function.get());
  }
}

void GraphedCall::check_parameters_in_place() const {
  for (size_t i = 0; i < params_.size(); ++i)
    VOLT_CHECK(params_[i].data_ptr() == param_ptrs_[i], ConfigError, "config key 'trainer.cuda_graph': parameter '",
               param_names_[i], "' of module '", name_,
               "' was given new memory after its graph was captured (by "
               "set_data, to(), or a strategy that gathers parameters anew); the graph reads the memory it captured. "
               "Change parameters in place (copy_), or turn trainer.cuda_graph off");
}

torch::Tensor GraphedCall::run(const TensorVec& inputs) {
  TORCH_INTERNAL_ASSERT(captured(), "GraphedCall run before capture");
  check_parameters_in_place();
  {
    torch::NoGradGuard ng;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].defined()) static_in_[i].copy_(inputs[i]);
  }
  fwd_->replay();
  ++generation_;
  torch::Tensor out = static_out_.detach();
  std::shared_ptr<GraphedBackward> node(new GraphedBackward(shared_from_this(), generation_),
                                        torch::autograd::deleteNode);
  auto edges = torch::autograd::collect_next_edges(inputs);
  auto param_edges = torch::autograd::collect_next_edges(params_);
  edges.insert(edges.end(), param_edges.begin(), param_edges.end());
  node->set_next_edges(std::move(edges));
  torch::autograd::create_gradient_edge(out, node);
  return out;
}

torch::autograd::variable_list GraphedCall::replay_backward(const torch::Tensor& grad_output, uint64_t generation) {
  VOLT_CHECK(generation == generation_, ConfigError, "config key 'trainer.cuda_graph': module '", name_,
             "' ran its captured forward again before the backward of an earlier call reached it, so that call's "
             "output and saved activations are overwritten. Run backward before calling the module again in the "
             "same way, or turn trainer.cuda_graph off");
  torch::autograd::variable_list result(static_in_.size() + params_.size());
  if (!grad_output.defined()) return result;
  {
    torch::NoGradGuard ng;
    static_grad_out_.copy_(grad_output);
  }
  bwd_->replay();
  size_t j = 0;
  for (size_t i = 0; i < static_in_.size(); ++i)
    if (static_in_[i].defined() && static_in_[i].requires_grad()) result[i] = static_grads_[j++];
  for (size_t k = 0; k < params_.size(); ++k) result[static_in_.size() + k] = static_grads_[j++];
  return result;
}

}  // namespace volt::detail
