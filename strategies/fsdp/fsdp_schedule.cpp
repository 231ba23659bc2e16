#include "volt/strategies/fsdp/fsdp_schedule.h"

#include <torch/torch.h>

#include <algorithm>
#include <unordered_set>

#include "volt/core/errors.h"
#include "volt/core/grad_hooks.h"
#include "volt/core/hooked_module.h"
#include "volt/strategies/activation_checkpointing.h"

namespace volt::detail {

/// Runs around one unit's forward: gather, run, hook the output for backward, free.
class UnitInterceptor : public ForwardInterceptor {
 public:
  UnitInterceptor(FSDPSchedule* s, size_t unit, std::weak_ptr<bool> alive) : s_(s), unit_(unit), alive_(alive) {}
  torch::Tensor around(torch::nn::Module&, const TensorVec& inputs, const ForwardFn& next) override {
    if (alive_.expired()) return next(inputs);
    s_->pre_forward(unit_);
    torch::Tensor out;
    try {
      out = next(inputs);
    } catch (const c10::Error& e) {
      rethrow_if_foreign_param(e);
      throw;
    }
    s_->post_forward(unit_, out);
    return out;
  }
  const char* name() const override { return "fsdp"; }

 private:
  /// A parameter whose storage is freed, read inside this unit: it belongs to another unit, which
  /// is sharded now (weights tied or shared across units). LibTorch's own message says only
  /// "out of bounds for storage of size 0"; this one says what to do.
  void rethrow_if_foreign_param(const c10::Error& e) const {
    const std::string what = e.what();
    if (what.find("for storage of size 0") == std::string::npos) return;
    throw ConfigError(detail::str_cat(
        "FSDP: the forward of unit '", s_->units()[unit_].name,
        "' read a parameter whose storage is freed: a parameter of another unit, which is sharded while this one "
        "runs (a weight tied or shared across units). Put the modules that share parameters in one unit (wrap "
        "their common parent, or leave them to the root unit) in trainer.strategy.auto_wrap_policy. LibTorch said: ",
        what.substr(0, what.find('\n'))));
  }

  FSDPSchedule* s_;
  size_t unit_;
  std::weak_ptr<bool> alive_;
};

FSDPSchedule::FSDPSchedule(FSDPScheduleOptions options, const FSDPMesh& mesh) : options_(options), mesh_(mesh) {}

FSDPSchedule::~FSDPSchedule() { alive_.reset(); }

void FSDPSchedule::install(std::vector<FSDPUnit> units) {
  units_ = std::move(units);
  std::weak_ptr<bool> alive = alive_;
  for (size_t ui = 0; ui < units_.size(); ++ui) {
    FSDPUnit& u = units_[ui];
    if (ui > 0)
      dynamic_cast<HookedModule*>(u.module)->add_interceptor(std::make_shared<UnitInterceptor>(this, ui, alive_), 0);
    for (auto& e : u.flat->entries()) {
      if (!e.param.requires_grad()) continue;
      accumulators_.push_back(add_grad_ready_hook(e.param, [this, ui, alive] {
        if (alive.expired() || ui >= units_.size()) return;
        if (units_[ui].grad_ready()) on_grads_ready(ui);
      }));
    }
  }
}

std::vector<FSDPUnit> FSDPSchedule::uninstall() {
  for (size_t ui = 1; ui < units_.size(); ++ui)
    if (auto* h = dynamic_cast<HookedModule*>(units_[ui].module)) h->remove_interceptors("fsdp");
  alive_ = std::make_shared<bool>(true);  // the old token expires: leftover hooks do nothing
  accumulators_.clear();
  forward_order_.clear();
  current_order_.clear();
  return std::move(units_);
}

// ---------------------------------------------------------------------------------------------
// forward

bool FSDPSchedule::may_prefetch() const {
  if (!options_.limit_all_gathers) return true;
  // At most two non-root units' parameters in flight (gathered or being gathered).
  int in_flight = 0;
  for (size_t i = 1; i < units_.size(); ++i)
    if (units_[i].flat->state() != UnitState::Sharded) ++in_flight;
  return in_flight < 2;
}

void FSDPSchedule::prefetch_backward(size_t ui) {
  // The unit whose backward comes next: the one that ran just before `ui` in this step's forward.
  if (!may_prefetch()) return;
  auto it = std::find(current_order_.begin(), current_order_.end(), ui);
  if (it == current_order_.end()) return;
  // Units whose backward does not read their parameters (embeddings) are not gathered: skip them.
  while (it != current_order_.begin() && !gathers_for_backward(*(it - 1))) --it;
  if (it == current_order_.begin()) return;
  units_[*(it - 1)].flat->unshard_async(mesh_.shard_group());
}

void FSDPSchedule::prefetch_after(size_t ui, bool backward) {
  if (!may_prefetch()) return;
  if (backward) {
    if (options_.backward_prefetch == BackwardPrefetch::BackwardPre) prefetch_backward(ui);
    return;
  }
  if (!options_.forward_prefetch || forward_order_.empty()) return;
  // The unit that ran after this one in the previous iteration.
  auto it = std::find(forward_order_.begin(), forward_order_.end(), ui);
  if (it == forward_order_.end() || it + 1 == forward_order_.end()) return;
  units_[*(it + 1)].flat->unshard_async(mesh_.shard_group());
}

void FSDPSchedule::unshard(size_t ui) {
  FlatParam& f = *units_[ui].flat;
  // Timed only when it gathers (a unit already gathered, or being prefetched, returns at once).
  auto scope = profile(f.state() == UnitState::Sharded ? options_.profiler : nullptr, "[FSDP]all_gather");
  f.unshard(mesh_.shard_group());
}

void FSDPSchedule::begin_training_step() {
  current_order_.clear();
  reshard_units();
  unshard(0);
}

void FSDPSchedule::reshard_units() {
  // Normally a no-op: backward frees every unit. A forward whose loss never went backward (a
  // step that returned no loss, a manual step) may leave a unit gathered, whose values an
  // optimizer step would make stale.
  for (size_t i = 1; i < units_.size(); ++i)
    if (units_[i].flat->state() != UnitState::Sharded) reshard(i);
}

void FSDPSchedule::with_root_gathered(const std::function<void()>& fn) {
  unshard(0);
  fn();
  reshard(0);
}

void FSDPSchedule::pre_forward(size_t ui) {
  unshard(ui);
  if (torch::GradMode::is_enabled()) {
    current_order_.push_back(ui);
    units_[ui].state = TrainingState::Forward;
  }
  prefetch_after(ui, false);
}

void FSDPSchedule::post_forward(size_t ui, const torch::Tensor& out) {
  const bool grad = torch::GradMode::is_enabled() && out.requires_grad();
  if (grad) {
    std::weak_ptr<bool> alive = alive_;
    // Pre-backward: gather again (if freed) before this unit's backward runs, prefetch the next.
    const_cast<torch::Tensor&>(out).register_hook([this, ui, alive](const torch::Tensor& g) {
      if (!alive.expired() && ui < units_.size()) {
        units_[ui].state = TrainingState::PreBackward;
        if (gathers_for_backward(ui)) unshard(ui);
        prefetch_after(ui, true);
      }
      return g;
    });
  }
  if (!grad || (options_.free_after_forward && !runs_again_next(ui))) reshard(ui);
}

bool FSDPSchedule::runs_again_next(size_t ui) const {
  // [Note: freeing after forward] FULL_SHARD frees a unit after its forward, except where the
  // previous step's order (the same on every rank) says the next gather would be this unit's own:
  // it runs again at once (the demo's embedding, called for the source and then the target), or
  // its forward was the last, so its backward comes first and would gather it again straight
  // away (PyTorch's FSDP keeps its root gathered for the same reason). Either way the memory is
  // what the next gather would have taken, and one all-gather of the unit is saved.
  const size_t pos = current_order_.size();  // this call is current_order_[pos - 1]
  if (pos == 0 || pos > forward_order_.size() || forward_order_[pos - 1] != ui) return false;
  return pos == forward_order_.size() ? gathers_for_backward(ui) : forward_order_[pos] == ui;
}

bool FSDPSchedule::gathers_for_backward(size_t ui) const {
  // Asked each time: activation checkpointing may be applied after the units are installed.
  const auto* h = dynamic_cast<const HookedModule*>(units_[ui].module);
  return ui == 0 || h == nullptr || h->backward_reads_parameters() ||
         h->has_interceptor(ActivationCheckpointing::kName);
}

// ---------------------------------------------------------------------------------------------
// backward

void FSDPSchedule::on_grads_ready(size_t ui) {
  FSDPUnit& u = units_[ui];
  if (u.grads_handled()) return;
  u.state = TrainingState::PostBackward;
  // Its gradients are complete, so no backward node needs its parameters any more: freed before
  // the reduction allocates its buffers (the root too: the whole model, when it is the only unit).
  // A unit with a frozen parameter stays gathered until finish_backward (see FSDPUnit::has_frozen).
  if (!u.has_frozen || !in_backward_) reshard(ui);
  // Without sync (an accumulation micro-step) the full gradients stay in param.grad and
  // accumulate; only the parameters are freed.
  if (sync_) {
    // Launched without waiting: the exchange runs on the backend's threads while autograd goes on
    // with earlier units. The previous unit's reduction is waited for first, so one runs behind
    // the next unit's backward and the buffers of at most two are alive (their gradient copies
    // are the largest transient of a step).
    if (in_flight_) units_[*in_flight_].flat->wait_reduce();
    const std::optional<size_t> previous = in_flight_;
    {
      auto reduce_scope = profile(options_.profiler, "[FSDP]reduce_scatter");
      u.flat->reduce_gradients_async(mesh_.shard_group(), options_.reduce_dtype, options_.world_size);
    }
    in_flight_ = ui;
    // optimizer_in_backward: the previous unit's gradient is final now; it steps while this unit's
    // reduction runs. Units reduced at the end of backward step in finish_backward instead.
    if (stepper_ && previous && in_backward_) finish_and_step(*previous);
  }
  // BACKWARD_POST: the next unit's gather starts once this unit's gradients are done (less overlap
  // than BACKWARD_PRE, one unit less in memory at the peak).
  if (in_backward_ && options_.backward_prefetch == BackwardPrefetch::BackwardPost) prefetch_backward(ui);
}

void FSDPSchedule::finish_and_step(size_t ui) {
  FlatParam& f = *units_[ui].flat;
  // Its gradient hooks all fired on this rank, so this rank had gradients, and every rank runs the
  // same graph: the flag resolve_reductions would agree on is true.
  f.finish_reduce(mesh_.replicate_group(), f.had_local_grad());
  step_unit(ui);
  ++backward_steps_.during_autograd;
}

void FSDPSchedule::step_unit(size_t ui) {
  FlatParam& f = *units_[ui].flat;
  f.expose_slice_grads();
  // Offloaded, the gradient is still being copied to the host: the stepper waits for this mark.
  compat::DeviceMark ready;
  if (f.offloaded()) ready.record(options_.device);
  auto scope = profile(options_.profiler, "[FSDP]optimizer_in_backward");
  stepper_->step(f, ready);
  stepped_[ui] = 1;
  ++backward_steps_.units;
}

void FSDPSchedule::backward(const torch::Tensor& loss, bool sync) {
  sync_ = sync;
  for (auto& u : units_) u.begin_backward();
  if (stepper_ && sync) {
    stepped_.assign(units_.size(), 0);
    backward_steps_ = {};
  }
  in_backward_ = true;
  try {
    loss.backward();
  } catch (...) {
    in_backward_ = false;
    sync_ = true;
    in_flight_.reset();
    if (stepper_) {
      try {
        stepper_->finish();  // no step may still run on the shards once backward has failed
      } catch (...) {
      }
    }
    throw;
  }
  in_backward_ = false;
  finish_backward();
  sync_ = true;
}

void FSDPSchedule::finish_backward() {
  if (sync_) {
    // Units some of whose parameters got no gradient (unused this step) and the root, in unit
    // index order: the same order on every rank, so the collectives line up.
    for (size_t i = 0; i < units_.size(); ++i)
      if (!units_[i].grads_handled()) on_grads_ready(i);
    resolve_reductions();
    // Offloaded gradient shards were copied to pinned host memory asynchronously: one wait for
    // all of them before the optimizer (on the host) reads them.
    if (std::any_of(units_.begin(), units_.end(), [](const FSDPUnit& u) { return u.flat->offloaded(); }))
      torch::cuda::synchronize(options_.device.index());
    if (stepper_) {
      // optimizer_in_backward: the units not stepped yet (the last to get gradients, unused ones,
      // the root), then every step finished before backward returns.
      for (size_t i = 0; i < units_.size(); ++i)
        if (!stepped_[i]) step_unit(i);
      stepper_->finish();
    } else {
      for (auto& u : units_) u.flat->expose_slice_grads();
    }
  }
  for (size_t i = 0; i < units_.size(); ++i) {
    reshard(i);
    units_[i].state = TrainingState::Idle;
  }
  forward_order_ = current_order_;
}

void FSDPSchedule::resolve_reductions() {
  auto scope = profile(options_.profiler, "[FSDP]reduce_scatter_wait");
  if (in_flight_) units_[*in_flight_].flat->wait_reduce();
  in_flight_.reset();
  // Whether any rank had a gradient for each unit: one small collective per group for all units
  // (not one host read per unit), in unit order on every rank.
  std::vector<float> local;
  for (auto& u : units_) local.push_back(u.flat->reduce_pending() && u.flat->had_local_grad() ? 1.0f : 0.0f);
  torch::Tensor flags = torch::tensor(local);
  for (ProcessGroup* pg : {mesh_.shard_group(), mesh_.replicate_group()})
    if (pg && pg->size() > 1) pg->all_reduce(flags, ReduceOp::Max);
  auto f = flags.accessor<float, 1>();
  for (size_t i = 0; i < units_.size(); ++i) units_[i].flat->finish_reduce(mesh_.replicate_group(), f[i] != 0);
}

void FSDPSchedule::zero_grad(const torch::optim::Optimizer& optimizer) {
  std::unordered_set<const c10::TensorImpl*> mine;
  for (const auto& g : optimizer.param_groups())
    for (const auto& p : g.params()) mine.insert(p.unsafeGetTensorImpl());
  for (auto& u : units_) {
    FlatParam& f = *u.flat;
    bool others_pending = false;
    for (const auto& s : f.slices())
      if (!mine.count(s.view.unsafeGetTensorImpl()) && s.view.grad().defined()) others_pending = true;
    for (const auto& s : f.slices()) {
      if (!mine.count(s.view.unsafeGetTensorImpl())) continue;
      if (others_pending && f.shard_grad().defined()) f.shard_grad().narrow(0, s.shard_offset, s.length).zero_();
      f.entries()[s.entry].param.mutable_grad() = torch::Tensor();
    }
    if (others_pending) continue;
    f.shard_grad() = torch::Tensor();
    for (auto& e : f.entries()) e.param.mutable_grad() = torch::Tensor();
  }
}

}  // namespace volt::detail
