#include "volt/optim/fused_adam.h"

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>

#include <cmath>
#include <typeinfo>

#include "volt/core/compat.h"
#include "volt/optim/adam_kernel.h"

namespace volt {
namespace {

bool host_fp32(const torch::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.scalar_type() == torch::kFloat && t.layout() == torch::kStrided &&
         t.is_contiguous();
}

template <class State>
bool state_ok(torch::optim::Optimizer& opt, const torch::Tensor& p) {
  auto it = opt.state().find(compat::optimizer_state_key(p));
  if (it == opt.state().end()) return true;  // created on the first step
  auto* st = dynamic_cast<State*>(it->second.get());
  if (st == nullptr) return false;
  auto same = [&](const torch::Tensor& t) { return host_fp32(t) && t.numel() == p.numel(); };
  return same(st->exp_avg()) && same(st->exp_avg_sq()) &&
         (!st->max_exp_avg_sq().defined() || same(st->max_exp_avg_sq()));
}

template <class State>
bool all_ok(torch::optim::Optimizer& opt) {
  for (auto& group : opt.param_groups())
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (!host_fp32(p) || !host_fp32(p.grad()) || p.grad().numel() != p.numel() || !state_ok<State>(opt, p))
        return false;
    }
  return true;
}

// Below this many elements a parameter is stepped on the calling thread.
constexpr int64_t kGrain = 1 << 15;

template <class Options, class State, bool kDecoupled>
void step_all(torch::optim::Optimizer& opt) {
  torch::NoGradGuard no_grad;
  for (auto& group : opt.param_groups()) {
    const auto& o = static_cast<const Options&>(group.options());
    const double lr = o.lr(), wd = o.weight_decay();
    const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto key = compat::optimizer_state_key(p);
      auto it = opt.state().find(key);
      if (it == opt.state().end()) {
        // As torch::optim initializes it: zeros, step 0.
        auto st = std::make_unique<State>();
        st->step(0);
        st->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        st->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        if (o.amsgrad()) st->max_exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        opt.state()[key] = std::move(st);
        it = opt.state().find(key);
      }
      auto& st = static_cast<State&>(*it->second);
      // amsgrad switched on after the state was made: start its maximum at zero (torch::optim 1.13
      // would fail on the undefined tensor).
      if (o.amsgrad() && !st.max_exp_avg_sq().defined()) st.max_exp_avg_sq(torch::zeros_like(p));
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
      float* pp = p.data_ptr<float>();
      const float* gp = p.grad().data_ptr<float>();
      float* mp = st.exp_avg().template data_ptr<float>();
      float* vp = st.exp_avg_sq().template data_ptr<float>();
      float* xp = o.amsgrad() ? st.max_exp_avg_sq().template data_ptr<float>() : nullptr;
      at::parallel_for(0, p.numel(), kGrain, [&](int64_t b, int64_t e) {
        detail::adam_kernel(pp + b, gp + b, mp + b, vp + b, xp ? xp + b : nullptr, e - b, s);
      });
      // Written through raw pointers: record the in-place updates as torch::optim's ops would, so
      // autograd still refuses a graph that saved the old values.
      torch::autograd::impl::bump_version(p);
      torch::autograd::impl::bump_version(st.exp_avg());
      torch::autograd::impl::bump_version(st.exp_avg_sq());
      if (xp) torch::autograd::impl::bump_version(st.max_exp_avg_sq());
    }
  }
}

enum class Kind { None, Adam, AdamW };
Kind kind_of(const torch::optim::Optimizer& opt) {
  if (typeid(opt) == typeid(torch::optim::AdamW)) return Kind::AdamW;
  if (typeid(opt) == typeid(torch::optim::Adam)) return Kind::Adam;
  return Kind::None;
}

}  // namespace

bool fused_adam_supported(torch::optim::Optimizer& optimizer) {
  switch (kind_of(optimizer)) {
    case Kind::AdamW:
      return all_ok<torch::optim::AdamWParamState>(optimizer);
    case Kind::Adam:
      return all_ok<torch::optim::AdamParamState>(optimizer);
    case Kind::None:
      break;
  }
  return false;
}

bool fused_adam_step(torch::optim::Optimizer& optimizer) {
  if (!fused_adam_supported(optimizer)) return false;
  if (kind_of(optimizer) == Kind::AdamW)
    step_all<torch::optim::AdamWOptions, torch::optim::AdamWParamState, true>(optimizer);
  else
    step_all<torch::optim::AdamOptions, torch::optim::AdamParamState, false>(optimizer);
  return true;
}

}  // namespace volt
