#include "volt/strategies/ddp.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <set>

#include "volt/core/errors.h"
#include "volt/core/grad_hooks.h"
#include "volt/core/large_buffer.h"
#include "volt/module/lightning_module.h"

namespace volt {

namespace {
/// A parameter frozen after the buckets were built (requires_grad false, e.g. by LightningModule::freeze)
/// gets no gradient by design: it is neither waited for nor reported unused, and its gradient is left
/// alone; once it requires grad again it is averaged as before.
template <class SlotT>
bool frozen(const SlotT& s) {
  return !s.param.requires_grad();
}

/// True when `grad` is exactly the bucket view (not merely another tensor over the same storage).
bool is_view_of(const torch::Tensor& grad, const torch::Tensor& view) {
  return grad.defined() && grad.is_alias_of(view) && grad.data_ptr() == view.data_ptr() && grad.sizes() == view.sizes();
}

/// "'a', 'b', 'c' and 4 more"
std::string name_list(const std::vector<std::string>& names) {
  constexpr size_t kShown = 8;
  std::string out;
  for (size_t i = 0; i < names.size() && i < kShown; ++i) out += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > kShown) out += detail::str_cat(" and ", names.size() - kShown, " more");
  return out;
}

std::string rank_list(const std::vector<int64_t>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

}  // namespace

DDPStrategy::DDPStrategy(Precision precision, std::string accelerator, int64_t devices, int64_t num_nodes,
                         DDPOptions options)
    : ParallelStrategy(std::move(precision), std::move(accelerator), devices, num_nodes,
                       std::chrono::seconds(options.timeout), options.process_group_backend),
      options_(options) {
  options_.validate();
}

DDPStrategy::~DDPStrategy() { alive_.reset(); }

void DDPStrategy::setup_module(LightningModule& module) {
  Strategy::setup_module(module);
  broadcast_module(module);
  build_buckets(module);
  spdlog::info("DDP: {} parameters in {} bucket(s) of <= {} MB{}{}{}", slots_.size(), buckets_.size(),
               options_.bucket_cap_mb, options_.find_unused_parameters ? ", find_unused_parameters" : "",
               options_.static_graph ? ", static_graph" : "",
               options_.gradient_as_bucket_view ? ", gradient_as_bucket_view" : "");
}

bool DDPStrategy::trainable_set_grew(LightningModule& module) const {
  for (const auto& p : module.parameters())
    if (p.requires_grad() && !slot_of_.count(p.unsafeGetTensorImpl())) return true;
  return false;
}

void DDPStrategy::build_buckets(LightningModule& module) {
  // Buckets in reverse registration order: the last layers' gradients are ready first. A shared
  // (tied) parameter is one slot.
  std::vector<std::pair<std::string, torch::Tensor>> params;
  std::set<c10::TensorImpl*> seen;
  for (auto& kv : module.named_parameters())
    if (kv.value().requires_grad() && seen.insert(kv.value().unsafeGetTensorImpl()).second)
      params.emplace_back(kv.key(), kv.value());
  std::reverse(params.begin(), params.end());
  const int64_t cap = static_cast<int64_t>(options_.bucket_cap_mb * 1024 * 1024);
  slots_.clear();
  buckets_.clear();
  slot_of_.clear();
  int64_t bytes = 0;
  for (auto& [name, p] : params) {
    const int64_t b = p.numel() * p.element_size();
    if (buckets_.empty() || bytes + b > cap ||
        slots_[buckets_.back().slots.front()].param.scalar_type() != p.scalar_type()) {
      buckets_.emplace_back();
      bytes = 0;
    }
    Slot s;
    s.name = name;
    s.param = p;
    s.bucket = buckets_.size() - 1;
    s.offset = buckets_.back().numel;
    buckets_.back().slots.push_back(slots_.size());
    buckets_.back().numel += p.numel();
    slot_of_.emplace(p.unsafeGetTensorImpl(), slots_.size());
    slots_.push_back(std::move(s));
    bytes += b;
  }
  static_learned_ = false;
  static_global_used_.clear();
  next_bucket_ = 0;
  if (options_.gradient_as_bucket_view) {
    // One persistent tensor per bucket; each gradient gets a contiguous place in it. The views are
    // plain tensors over the bucket's storage (not autograd views), so LibTorch's
    // Optimizer::zero_grad (detach_ + zero_) works on them as on any gradient.
    torch::NoGradGuard ng;
    const int64_t flags = world_size() > 1 ? static_cast<int64_t>(slots_.size()) + world_size() : 0;
    for (size_t bi = 0; bi < buckets_.size(); ++bi) {
      Bucket& b = buckets_[bi];
      const auto opts = slots_[b.slots.front()].param.options();
      b.flat = torch::zeros({b.numel + (bi + 1 == buckets_.size() ? flags : 0)}, opts);
      for (size_t s : b.slots) {
        Slot& sl = slots_[s];
        sl.view = torch::empty({0}, opts);
        sl.view.set_(b.flat.storage(), b.flat.storage_offset() + sl.offset, sl.param.sizes());
      }
    }
  }
  // One hook per parameter for the strategy's life; it finds the parameter's slot of the current
  // buckets (none while it is left out).
  for (const auto& sl : slots_) {
    const c10::TensorImpl* key = sl.param.unsafeGetTensorImpl();
    if (!hooked_.insert(key).second) continue;
    std::weak_ptr<bool> alive = alive_;
    accumulators_.push_back(detail::add_grad_ready_hook(sl.param, [this, key, alive] {
      if (alive.expired()) return;
      auto it = slot_of_.find(key);
      if (it != slot_of_.end()) on_grad_ready(it->second);
    }));
  }
}

std::vector<torch::Tensor> DDPStrategy::bucket_tensors() const {
  std::vector<torch::Tensor> out;
  for (const auto& b : buckets_) out.push_back(b.flat);
  return out;
}

void DDPStrategy::on_grad_ready(size_t s) {
  if (s >= slots_.size()) return;
  Slot& sl = slots_[s];
  // The hook also runs when no gradient arrived (an output of the parameter was not used): only a
  // defined gradient makes the parameter used, as in PyTorch's reducer.
  const bool has_grad = sl.param.grad().defined();
  if (has_grad) sl.used = true;  // also on accumulation micro-steps: used since the last sync
  if (!sync_ || sl.ready || !sl.expected) return;
  Bucket& b = buckets_[sl.bucket];
  if (b.launched) return;
  sl.ready = true;
  if (options_.gradient_as_bucket_view && has_grad) {
    // Used here, hence used on some rank: its averaged gradient will be this view. A gradient that
    // autograd created (after zero_grad set it to none) is copied in once and then released.
    torch::NoGradGuard ng;
    torch::Tensor& g = sl.param.mutable_grad();
    if (!is_view_of(g, sl.view)) {
      sl.view.copy_(g);
      g = sl.view;
    }
  }
  if (--b.pending == 0) launch_ready();
}

void DDPStrategy::launch_ready() {
  // Collectives must be issued in the same order on every rank, so a bucket waits for the ones
  // before it; the last bucket goes after backward, when the used flags it carries are final.
  while (next_bucket_ + 1 < buckets_.size() && buckets_[next_bucket_].pending == 0) launch(next_bucket_++);
}

torch::Tensor DDPStrategy::local_flags() const {
  // Per parameter, then one per rank (1 on this rank's own place when it has a problem). After the
  // all-reduce (mean) a flag is > 0 exactly when some rank set it.
  //   find_unused_parameters, or static_graph's first step: per parameter, "used here";
  //   otherwise: "a problem here" (no gradient; static_graph: used differently from the first step).
  const int64_t n = static_cast<int64_t>(slots_.size());
  torch::Tensor f = torch::zeros({n + world_size()}, torch::kFloat);
  auto a = f.accessor<float, 1>();
  const bool want_used = !static_learned() && (options_.find_unused_parameters || options_.static_graph);
  bool problem = false;
  for (int64_t i = 0; i < n; ++i) {
    const Slot& s = slots_[i];
    const bool bad = !frozen(s) && (static_learned() ? s.used != s.expected : !s.used);
    if (want_used) {
      a[i] = s.used ? 1.f : 0.f;
    } else {
      a[i] = bad ? 1.f : 0.f;
      problem = problem || bad;
    }
  }
  if (problem) a[n + global_rank()] = 1.f;
  return f;
}

void DDPStrategy::launch(size_t bi) {
  Bucket& b = buckets_[bi];
  if (b.launched) return;
  b.launched = true;
  const bool last = bi + 1 == buckets_.size();
  torch::NoGradGuard ng;
  if (options_.gradient_as_bucket_view) {
    for (size_t s : b.slots) {
      Slot& sl = slots_[s];
      const torch::Tensor& g = sl.param.grad();
      if (!g.defined())
        sl.view.zero_();  // contributes zeros
      else if (!is_view_of(g, sl.view))
        sl.view.copy_(g);  // not re-pointed yet: it may turn out unused on every rank
    }
    if (last) b.flat.narrow(0, b.numel, b.flat.numel() - b.numel).copy_(local_flags());
  } else {
    // A fresh bucket each step, mapped on its own (core/large_buffer.h: no page fault per 4 KiB).
    const auto& first = slots_[b.slots.front()].param;
    const torch::Tensor flags = last ? local_flags().to(first.device(), first.scalar_type()) : torch::Tensor();
    b.flat = detail::empty_large(b.numel + (last ? flags.numel() : 0), first.options());
    for (size_t s : b.slots) {
      const Slot& sl = slots_[s];
      torch::Tensor dst = b.flat.narrow(0, sl.offset, sl.param.numel());
      if (sl.param.grad().defined())
        dst.copy_(sl.param.grad().reshape(-1));
      else
        dst.zero_();
    }
    if (last) b.flat.narrow(0, b.numel, flags.numel()).copy_(flags);
  }
  auto scope = profile(profiler_, "[DDP]all_reduce_bucket");  // the launch; the wait is all_reduce_wait
  b.work = device_mesh().group("dp")->all_reduce_async(b.flat, ReduceOp::Mean);
}

void DDPStrategy::run_backward(LightningModule& module, const torch::Tensor& loss, bool sync_gradients) {
  // A parameter frozen when the buckets were built and trainable since (BaseFinetuning's unfreeze):
  // every rank rebuilds its buckets the same way before this backward.
  if (trainable_set_grew(module)) {
    build_buckets(module);
    spdlog::info("DDP: the trainable parameters changed: {} parameters in {} bucket(s) now", slots_.size(),
                 buckets_.size());
  }
  if (!(sync_gradients && world_size() > 1) || buckets_.empty()) {
    loss.backward();  // the hooks only note which parameters got a gradient
    return;
  }
  for (auto& sl : slots_) sl.ready = false;
  for (auto& b : buckets_) {
    b.launched = false;
    b.pending = 0;
    for (size_t s : b.slots) b.pending += slots_[s].expected && !frozen(slots_[s]) ? 1 : 0;
  }
  next_bucket_ = 0;
  sync_ = true;
  launch_ready();  // static_graph: buckets of parameters unused on this rank need not wait
  try {
    loss.backward();
  } catch (...) {
    sync_ = false;
    throw;
  }
  sync_ = false;
  // Buckets with parameters that got no gradient here, and the last bucket, go now.
  while (next_bucket_ < buckets_.size()) launch(next_bucket_++);
  finish_sync();
}

void DDPStrategy::finish_sync() {
  auto wait_scope = profile(profiler_, "[DDP]all_reduce_wait");
  for (auto& b : buckets_) b.work.wait();
  wait_scope.end();
  const int64_t n = static_cast<int64_t>(slots_.size());
  const Bucket& lastb = buckets_.back();
  const torch::Tensor flags =
      lastb.flat.narrow(0, lastb.numel, n + world_size()).to(torch::kCPU, torch::kFloat).contiguous();
  auto a = flags.accessor<float, 1>();
  const bool used_mode = !static_learned() && (options_.find_unused_parameters || options_.static_graph);
  std::vector<char> global_used(n, 1);
  std::vector<std::string> bad;
  std::vector<int64_t> bad_ranks;
  std::vector<std::string> mine;          // this rank's own offending parameters
  for (int64_t i = n - 1; i >= 0; --i) {  // slots run backwards: name parameters in registration order
    const Slot& s = slots_[i];
    if (used_mode)
      global_used[i] = a[i] > 0.f;
    else if (static_learned())
      global_used[i] = static_global_used_[i];
    if (!used_mode && a[i] > 0.f) bad.push_back(s.name);
    if (!used_mode && !frozen(s) && (static_learned() ? s.used != s.expected : !s.used)) mine.push_back(s.name);
  }
  for (int64_t r = 0; r < world_size(); ++r)
    if (a[n + r] > 0.f) bad_ranks.push_back(r);
  if (options_.static_graph && !static_learned_) {
    // The first synchronized step fixes the graph: which parameters this rank uses, and which
    // are used on some rank (their gradients are averaged from now on; the others stay untouched).
    static_global_used_ = global_used;
    for (auto& s : slots_) s.expected = s.used;
    static_learned_ = true;
  } else if (!bad.empty()) {
    for (auto& s : slots_) s.used = false;
    if (!options_.gradient_as_bucket_view)
      for (auto& b : buckets_) b.flat = torch::Tensor();
    const std::string here =
        mine.empty() ? std::string() : detail::str_cat(" On this rank (", global_rank(), "): ", name_list(mine), ".");
    if (static_learned())
      throw TrainingError(detail::str_cat(
          "DDP with static_graph: true: the parameters that get a gradient changed after the first step: ",
          name_list(bad), " (on ", rank_list(bad_ranks), ").", here,
          " static_graph requires every step to use the same parameters as the first; set "
          "trainer.strategy.static_graph: false and find_unused_parameters: true for a model whose used "
          "parameters vary"));
    throw TrainingError(detail::str_cat(
        "DDP: parameter(s) ", name_list(bad), " received no gradient in this step's backward on ", rank_list(bad_ranks),
        ".", here,
        " With find_unused_parameters: false (the default) every parameter that requires grad must get a "
        "gradient on every rank. Set trainer.strategy.find_unused_parameters: true (or static_graph: true "
        "when the same parameters go unused every step), or set requires_grad false on parameters the "
        "model does not use"));
  }
  torch::NoGradGuard ng;
  for (int64_t i = 0; i < n; ++i) {
    Slot& s = slots_[i];
    s.used = false;
    if (!global_used[i] || frozen(s)) continue;  // unused on every rank, or frozen: its gradient stays as it was
    torch::Tensor& g = s.param.mutable_grad();
    if (options_.gradient_as_bucket_view) {
      if (!is_view_of(g, s.view)) g = s.view;
      continue;
    }
    auto avg = buckets_[s.bucket].flat.narrow(0, s.offset, s.param.numel()).view(s.param.sizes());
    if (g.defined())
      g.copy_(avg);
    else
      g = avg.clone();
  }
  if (!options_.gradient_as_bucket_view)
    for (auto& b : buckets_) b.flat = torch::Tensor();
}

void DDPStrategy::teardown(LightningModule& module) {
  // Hooks stay on the accumulators but do nothing once the slots are cleared.
  for (auto& b : buckets_) b.work = CollectiveWork();
  buckets_.clear();
  slots_.clear();
  static_learned_ = false;
  alive_ = std::make_shared<bool>(true);  // hooks installed so far become no-ops
  accumulators_.clear();
  hooked_.clear();
  slot_of_.clear();
  Strategy::teardown(module);
}

}  // namespace volt
