#include "volt/optim/fused_adam.h"

#include <torch/csrc/autograd/variable.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <tuple>
#include <typeinfo>
#include <unordered_set>
#include <vector>

#include "volt/core/compat.h"
#include "volt/core/host_parallel.h"
#include "volt/optim/adam_kernel.h"

namespace volt {
namespace {

/// The parameters a step is limited to (null: all of them).
using Filter = std::unordered_set<const c10::TensorImpl*>;
bool selected(const Filter* only, const torch::Tensor& p) {
  return only == nullptr || only->count(p.unsafeGetTensorImpl());
}

bool dense(const torch::Tensor& t) { return t.defined() && t.layout() == torch::kStrided && t.is_contiguous(); }
bool host_fp32(const torch::Tensor& t) { return dense(t) && t.device().is_cpu() && t.scalar_type() == torch::kFloat; }
/// A tensor the ATen kernel takes beside `p`: same device and dtype, dense, as many elements.
bool like(const torch::Tensor& t, const torch::Tensor& p) {
  return dense(t) && t.device() == p.device() && t.scalar_type() == p.scalar_type() && t.numel() == p.numel();
}
bool aten_param(const torch::Tensor& p) {
  const auto d = p.scalar_type();
  return dense(p) && compat::fused_adam_available(p.device()) &&
         (d == torch::kFloat || d == torch::kHalf || d == torch::kBFloat16);
}

/// Whether the state of `p` (if it exists yet) has moments `ok` accepts.
template <class State, class Ok>
bool state_ok(torch::optim::Optimizer& opt, const torch::Tensor& p, const Ok& ok) {
  auto it = opt.state().find(compat::optimizer_state_key(p));
  if (it == opt.state().end()) return true;  // created on the first step
  auto* st = dynamic_cast<State*>(it->second.get());
  if (st == nullptr) return false;
  return ok(st->exp_avg()) && ok(st->exp_avg_sq()) && (!st->max_exp_avg_sq().defined() || ok(st->max_exp_avg_sq()));
}

template <class State>
bool host_ok(torch::optim::Optimizer& opt, const Filter* only) {
  for (auto& group : opt.param_groups())
    for (auto& p : group.params()) {
      if (!p.grad().defined() || !selected(only, p)) continue;
      auto same = [&](const torch::Tensor& t) { return host_fp32(t) && t.numel() == p.numel(); };
      if (!host_fp32(p) || !same(p.grad()) || !state_ok<State>(opt, p, same)) return false;
    }
  return true;
}

template <class State>
bool aten_ok(torch::optim::Optimizer& opt, const Filter* only) {
  for (auto& group : opt.param_groups())
    for (auto& p : group.params()) {
      if (!p.grad().defined() || !selected(only, p)) continue;
      auto same = [&](const torch::Tensor& t) { return like(t, p); };
      if (!aten_param(p) || !same(p.grad()) || !state_ok<State>(opt, p, same)) return false;
    }
  return true;
}

/// The state of `p`, created as torch::optim creates it (zeros, step 0) on its first step.
template <class State>
State& state_for(torch::optim::Optimizer& opt, const torch::Tensor& p, bool amsgrad) {
  auto key = compat::optimizer_state_key(p);
  auto it = opt.state().find(key);
  if (it == opt.state().end()) {
    auto st = std::make_unique<State>();
    st->step(0);
    st->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    st->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    if (amsgrad) st->max_exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    opt.state()[key] = std::move(st);
    it = opt.state().find(key);
  }
  auto& st = static_cast<State&>(*it->second);
  // amsgrad switched on after the state was made: start its maximum at zero (torch::optim 1.13
  // would fail on the undefined tensor).
  if (amsgrad && !st.max_exp_avg_sq().defined()) st.max_exp_avg_sq(torch::zeros_like(p));
  return st;
}

// Elements a host thread takes at least (about 7 MB of memory traffic, 28 bytes an element): below
// twice this a step runs on the calling thread, since a thread costs tens of microseconds to start.
constexpr int64_t kGrain = 1 << 18;

/// One parameter's share of a host step: its arrays and scalars.
struct HostItem {
  float *p, *m, *v, *vmax;
  const float* g;
  int64_t n;
  detail::AdamScalars s;
};

/// Whether two items' parameters share memory (one tensor in two param groups, or overlapping
/// views): torch::optim steps them one after the other, which only one thread can reproduce.
bool overlapping(const std::vector<HostItem>& items) {
  std::vector<std::pair<uintptr_t, uintptr_t>> spans;  // [begin, end) addresses
  for (const auto& it : items) {
    const auto b = reinterpret_cast<uintptr_t>(it.p);
    spans.emplace_back(b, b + static_cast<uintptr_t>(it.n) * sizeof(float));
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i - 1].second > spans[i].first) return true;
  return false;
}

/// Runs every item's update in order, all items' elements split across the host threads as one
/// range (host_parallel.h: at::parallel_for would run on one thread here).
void run_host_items(const std::vector<HostItem>& items) {
  std::vector<int64_t> start(items.size() + 1, 0);
  for (size_t i = 0; i < items.size(); ++i) start[i + 1] = start[i] + items[i].n;
  const int threads = overlapping(items) ? 1 : detail::host_threads();
  detail::host_parallel_for(start.back(), kGrain, threads, [&](int64_t b, int64_t e) {
    size_t i = static_cast<size_t>(std::upper_bound(start.begin(), start.end(), b) - start.begin()) - 1;
    for (; b < e; ++i) {
      const HostItem& it = items[i];
      const int64_t lo = b - start[i], hi = std::min(e, start[i + 1]) - start[i];
      if (hi > lo)
        detail::adam_kernel(it.p + lo, it.g + lo, it.m + lo, it.v + lo, it.vmax ? it.vmax + lo : nullptr, hi - lo,
                            it.s);
      b = start[i] + hi;
    }
  });
}

template <class Options, class State, bool kDecoupled>
void host_step(torch::optim::Optimizer& opt, const Filter* only) {
  torch::NoGradGuard no_grad;
  // The states first (what can fail: the moments' memory), so that no step count moves unless every
  // parameter is then updated; the loop below takes them in the same order.
  std::vector<State*> states;
  for (auto& group : opt.param_groups())
    for (auto& p : group.params())
      if (p.grad().defined() && selected(only, p))
        states.push_back(&state_for<State>(opt, p, static_cast<const Options&>(group.options()).amsgrad()));
  auto next_state = states.begin();
  std::vector<HostItem> items;
  std::vector<torch::Tensor> written;
  for (auto& group : opt.param_groups()) {
    const auto& o = static_cast<const Options&>(group.options());
    const double lr = o.lr(), wd = o.weight_decay();
    const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
    for (auto& p : group.params()) {
      if (!p.grad().defined() || !selected(only, p)) continue;
      State& st = **next_state++;
      st.step(st.step() + 1);
      const double bc1 = 1 - std::pow(beta1, static_cast<double>(st.step()));
      const double bc2 = 1 - std::pow(beta2, static_cast<double>(st.step()));
      detail::AdamScalars s;
      if (kDecoupled) {
        if (wd != 0) s.decay = static_cast<float>(1 - lr * wd);
      } else {
        s.l2 = static_cast<float>(wd);
      }
      s.beta1 = static_cast<float>(beta1);
      s.one_minus_beta1 = static_cast<float>(1 - beta1);
      s.beta2 = static_cast<float>(beta2);
      s.one_minus_beta2 = static_cast<float>(1 - beta2);
      s.bias_correction2_sqrt = static_cast<float>(std::sqrt(bc2));
      s.eps = static_cast<float>(o.eps());
      s.neg_step_size = static_cast<float>(-lr / bc1);
      float* vmax = o.amsgrad() ? st.max_exp_avg_sq().template data_ptr<float>() : nullptr;
      items.push_back({p.data_ptr<float>(), st.exp_avg().template data_ptr<float>(),
                       st.exp_avg_sq().template data_ptr<float>(), vmax, p.grad().data_ptr<float>(), p.numel(), s});
      written.insert(written.end(), {p, st.exp_avg(), st.exp_avg_sq()});
      if (vmax) written.push_back(st.max_exp_avg_sq());
    }
  }
  run_host_items(items);
  // Written through raw pointers: record the in-place updates as torch::optim's ops would, so
  // autograd still refuses a graph that saved the old values.
  for (auto& t : written) torch::autograd::impl::bump_version(t);
}

template <class Options, class State, bool kDecoupled>
void aten_step(torch::optim::Optimizer& opt, const Filter* only) {
  torch::NoGradGuard no_grad;
  for (auto& group : opt.param_groups()) {
    const auto& o = static_cast<const Options&>(group.options());
    // One kernel call per device and dtype, as PyTorch's optimizers group them.
    struct Lists {
      std::vector<torch::Tensor> p, g, m, v, vmax;
      std::vector<float> steps;
    };
    std::map<std::tuple<int, int, int>, Lists> lists;
    for (auto& p : group.params()) {
      if (!p.grad().defined() || !selected(only, p)) continue;
      State& st = state_for<State>(opt, p, o.amsgrad());
      st.step(st.step() + 1);
      Lists& l = lists[{static_cast<int>(p.device().type()), p.device().index(), static_cast<int>(p.scalar_type())}];
      l.p.push_back(p);
      l.g.push_back(p.grad());
      l.m.push_back(st.exp_avg());
      l.v.push_back(st.exp_avg_sq());
      if (o.amsgrad()) l.vmax.push_back(st.max_exp_avg_sq());
      l.steps.push_back(static_cast<float>(st.step()));
    }
    for (auto& [key, l] : lists) {
      // The kernel reads each parameter's step number from a float tensor on its device. To a GPU
      // they go from pinned memory without waiting for the stream: the step may be queued inside
      // backward (optimizer_in_backward), behind kernels the host must not wait for.
      const torch::Device device = l.p.front().device();
      torch::Tensor host = torch::tensor(l.steps, torch::kFloat);
      std::vector<torch::Tensor> steps =
          (device.is_cpu() ? host : host.pin_memory().to(device, /*non_blocking=*/true)).unbind(0);
      compat::fused_adam_(kDecoupled, l.p, l.g, l.m, l.v, l.vmax, steps, o.lr(), std::get<0>(o.betas()),
                          std::get<1>(o.betas()), o.weight_decay(), o.eps(), o.amsgrad());
    }
  }
}

enum class Kind { None, Adam, AdamW };
Kind kind_of(const torch::optim::Optimizer& opt) {
  if (typeid(opt) == typeid(torch::optim::AdamW)) return Kind::AdamW;
  if (typeid(opt) == typeid(torch::optim::Adam)) return Kind::Adam;
  return Kind::None;
}

AdamStepPath path_of(torch::optim::Optimizer& opt, const Filter* only) {
  switch (kind_of(opt)) {
    case Kind::AdamW:
      if (host_ok<torch::optim::AdamWParamState>(opt, only)) return AdamStepPath::Host;
      if (aten_ok<torch::optim::AdamWParamState>(opt, only)) return AdamStepPath::ATen;
      break;
    case Kind::Adam:
      if (host_ok<torch::optim::AdamParamState>(opt, only)) return AdamStepPath::Host;
      if (aten_ok<torch::optim::AdamParamState>(opt, only)) return AdamStepPath::ATen;
      break;
    case Kind::None:
      break;
  }
  return AdamStepPath::Step;
}

/// Steps by a fused path after checking that it takes every selected parameter.
void fused(torch::optim::Optimizer& opt, AdamStepPath path, const Filter* only) {
  const Kind kind = kind_of(opt);
  TORCH_CHECK(kind != Kind::None, "fused Adam: ", to_string(path),
              " steps only torch::optim::Adam and AdamW (exactly those classes)");
  const bool adamw = kind == Kind::AdamW;
  if (path == AdamStepPath::Host) {
    TORCH_CHECK(
        adamw ? host_ok<torch::optim::AdamWParamState>(opt, only) : host_ok<torch::optim::AdamParamState>(opt, only),
        "fused Adam: the host kernel takes dense contiguous fp32 CPU parameters, gradients and state only");
    adamw ? host_step<torch::optim::AdamWOptions, torch::optim::AdamWParamState, true>(opt, only)
          : host_step<torch::optim::AdamOptions, torch::optim::AdamParamState, false>(opt, only);
    return;
  }
  TORCH_CHECK(
      adamw ? aten_ok<torch::optim::AdamWParamState>(opt, only) : aten_ok<torch::optim::AdamParamState>(opt, only),
      "fused Adam: PyTorch's fused kernel is not available for these tensors with this LibTorch (", TORCH_VERSION,
      "; CUDA needs 2.1+, CPU 2.4+; fp32/bf16/fp16, dense, contiguous)");
  adamw ? aten_step<torch::optim::AdamWOptions, torch::optim::AdamWParamState, true>(opt, only)
        : aten_step<torch::optim::AdamOptions, torch::optim::AdamParamState, false>(opt, only);
}

}  // namespace

const char* to_string(AdamStepPath path) {
  switch (path) {
    case AdamStepPath::Host:
      return "host";
    case AdamStepPath::ATen:
      return "aten";
    case AdamStepPath::Step:
      break;
  }
  return "step";
}

AdamStepPath fused_adam_path(torch::optim::Optimizer& optimizer) { return path_of(optimizer, nullptr); }

bool fused_adam_supported(torch::optim::Optimizer& optimizer) {
  return fused_adam_path(optimizer) != AdamStepPath::Step;
}

bool fused_adam_step(torch::optim::Optimizer& optimizer) {
  const AdamStepPath path = fused_adam_path(optimizer);
  if (path == AdamStepPath::Step) return false;
  fused(optimizer, path, nullptr);
  return true;
}

void fused_adam_step(torch::optim::Optimizer& optimizer, AdamStepPath path) {
  if (path == AdamStepPath::Step)
    optimizer.step();
  else
    fused(optimizer, path, nullptr);
}

AdamStepPath step_parameters(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& params) {
  Filter only;
  for (const auto& p : params) only.insert(p.unsafeGetTensorImpl());
  const AdamStepPath path = path_of(optimizer, &only);
  if (path != AdamStepPath::Step) {
    fused(optimizer, path, &only);
    return path;
  }
  // Each group cut down to the selected parameters for one step(), then restored.
  std::vector<std::vector<torch::Tensor>> saved;
  for (auto& group : optimizer.param_groups()) {
    saved.push_back(group.params());
    std::vector<torch::Tensor> mine;
    for (auto& p : group.params())
      if (selected(&only, p)) mine.push_back(p);
    group.params() = std::move(mine);
  }
  auto restore = [&] {
    for (size_t i = 0; i < saved.size(); ++i) optimizer.param_groups()[i].params() = std::move(saved[i]);
  };
  try {
    optimizer.step();
  } catch (...) {
    restore();
    throw;
  }
  restore();
  return path;
}

int64_t adam_state_bytes(torch::optim::Optimizer& optimizer) {
  int64_t bytes = 0;
  auto add = [&](const torch::Tensor& t) { bytes += t.defined() ? static_cast<int64_t>(t.nbytes()) : 0; };
  for (auto& kv : optimizer.state()) {
    if (auto* a = dynamic_cast<torch::optim::AdamWParamState*>(kv.second.get())) {
      add(a->exp_avg());
      add(a->exp_avg_sq());
      add(a->max_exp_avg_sq());
    } else if (auto* b = dynamic_cast<torch::optim::AdamParamState*>(kv.second.get())) {
      add(b->exp_avg());
      add(b->exp_avg_sq());
      add(b->max_exp_avg_sq());
    }
  }
  return bytes;
}

}  // namespace volt
