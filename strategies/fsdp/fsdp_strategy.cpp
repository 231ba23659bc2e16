#include "volt/strategies/fsdp/fsdp_strategy.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <iomanip>
#include <set>
#include <sstream>

#include "volt/checkpoint/sharded_checkpoint.h"
#include "volt/checkpoint/tensor_archive.h"
#include "volt/core/errors.h"
#include "volt/core/grad_hooks.h"
#include "volt/core/hooked_module.h"
#include "volt/strategies/module_policy.h"
#include "volt/trainer/lightning_module.h"

namespace volt {

namespace {

/// Runs around one unit's forward: gather, run, hook the output for backward, free.
class FSDPUnitInterceptor : public ForwardInterceptor {
 public:
  FSDPUnitInterceptor(FSDPStrategy* s, size_t unit, std::weak_ptr<bool> alive) : s_(s), unit_(unit), alive_(alive) {}
  torch::Tensor around(torch::nn::Module&, const TensorVec& inputs, const ForwardFn& next) override {
    if (alive_.expired()) return next(inputs);
    s_->pre_forward(unit_);
    torch::Tensor out = next(inputs);
    s_->post_forward(unit_, out);
    return out;
  }
  const char* name() const override { return "fsdp"; }

 private:
  FSDPStrategy* s_;
  size_t unit_;
  std::weak_ptr<bool> alive_;
};

bool frees_after_forward(const std::string& s) { return s == "FULL_SHARD" || s == "HYBRID_SHARD"; }

const std::vector<std::string> kStateFields = {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq",
                                               "momentum_buffer", "square_avg", "grad_avg", "sum"};

}  // namespace

FSDPStrategy::FSDPStrategy(Precision precision, std::string accelerator, int64_t devices, int64_t num_nodes,
                           FSDPOptions options)
    : ParallelStrategy(std::move(precision), std::move(accelerator), devices, num_nodes,
                       std::chrono::seconds(options.timeout), options.process_group_backend),
      options_(std::move(options)) {
  options_.validate();
  const int64_t world = devices * num_nodes;
  const std::string& s = options_.sharding_strategy;
  if (s == "NO_SHARD") {
    shard_size_ = 1;
    replicate_size_ = world;
  } else if (s == "HYBRID_SHARD" || s == "_HYBRID_SHARD_ZERO2") {
    std::vector<int64_t> mesh = options_.device_mesh;
    if (mesh.empty()) mesh = {num_nodes, devices};
    VOLT_CHECK(mesh[0] * mesh[1] == world, ConfigError, "config key 'trainer.strategy.device_mesh': (",
               mesh[0], ", ", mesh[1], ") has ", mesh[0] * mesh[1], " ranks but the world has ", world,
               " (devices x num_nodes); replicate_size x shard_size must equal it");
    VOLT_CHECK(options_.auto_wrap_policy.empty() == false || !options_.device_mesh.empty(), ConfigError,
               "config key 'trainer.strategy': ", s, " needs an auto_wrap_policy or a device_mesh");
    replicate_size_ = mesh[0];
    shard_size_ = mesh[1];
  } else {
    shard_size_ = world;
    replicate_size_ = 1;
  }
  // Mixed precision: derived from the Trainer's precision unless given explicitly.
  const bool bf16 = precision_.compute_dtype() == at::kBFloat16 || precision_.compute_dtype() == at::kHalf;
  param_dtype_ = options_.param_dtype ? Precision::dtype_from_name(*options_.param_dtype, "trainer.strategy.param_dtype")
                                      : (bf16 ? precision_.compute_dtype() : at::kFloat);
  reduce_dtype_ = options_.reduce_dtype
                      ? Precision::dtype_from_name(*options_.reduce_dtype, "trainer.strategy.reduce_dtype")
                      : param_dtype_;
  if (options_.buffer_dtype)
    buffer_dtype_ = Precision::dtype_from_name(*options_.buffer_dtype, "trainer.strategy.buffer_dtype");
}

FSDPStrategy::~FSDPStrategy() { alive_.reset(); }

std::string FSDPStrategy::precision_unsupported_reason(const Precision&) const { return {}; }

void FSDPStrategy::setup_environment() {
  ParallelStrategy::setup_environment();
  const int64_t r = global_rank();
  if (shard_size_ > 1 && shard_size_ < world_size()) {
    const int64_t g = r / shard_size_;
    std::vector<int64_t> ranks;
    for (int64_t i = 0; i < shard_size_; ++i) ranks.push_back(g * shard_size_ + i);
    shard_group_ = std::make_unique<ProcessGroup>(process_group(), ranks, "shard" + std::to_string(g));
  }
  if (replicate_size_ > 1 && replicate_size_ < world_size()) {
    const int64_t j = r % shard_size_;
    std::vector<int64_t> ranks;
    for (int64_t k = 0; k < replicate_size_; ++k) ranks.push_back(j + k * shard_size_);
    replicate_group_ = std::make_unique<ProcessGroup>(process_group(), ranks, "replicate" + std::to_string(j));
  }
}

ProcessGroup* FSDPStrategy::shard_pg() {
  if (shard_size_ == 1) return nullptr;
  return shard_group_ ? shard_group_.get() : &process_group();
}

ProcessGroup* FSDPStrategy::replicate_pg() {
  if (replicate_size_ == 1) return nullptr;
  return replicate_group_ ? replicate_group_.get() : &process_group();
}

void FSDPStrategy::setup_module(LightningModule& module) {
  module_ = &module;
  Strategy::setup_module(module);
  broadcast_module(module);  // sync_module_states: every rank starts from rank 0's weights
  if (buffer_dtype_) {
    // After the broadcast (Gloo cannot send bf16): buffers keep their identity, change dtype.
    torch::NoGradGuard ng;
    for (auto& kv : module.named_buffers()) kv.value().set_data(kv.value().to(*buffer_dtype_));
  }
  // Pick units: HookedModules the policy selects; inner units claim their parameters first.
  auto picked = select_modules(module, options_.auto_wrap_policy, "trainer.strategy.auto_wrap_policy", "FSDP");
  std::set<c10::TensorImpl*> claimed;
  std::vector<std::vector<detail::FlatParamEntry>> entries(picked.size());
  for (size_t i = picked.size(); i-- > 0;) {
    for (const auto& kv : picked[i].second->named_parameters()) {
      if (!claimed.insert(kv.value().unsafeGetTensorImpl()).second) continue;
      entries[i].push_back({picked[i].first + "." + kv.key(), kv.value()});
    }
  }
  std::vector<detail::FlatParamEntry> root;
  for (const auto& kv : module.named_parameters())
    // insert, not count: a shared (tied) parameter listed twice becomes one flat entry.
    if (claimed.insert(kv.value().unsafeGetTensorImpl()).second) root.push_back({kv.key(), kv.value()});
  const int64_t shard_rank = shard_pg() ? shard_pg()->rank() : 0;
  units_.clear();
  units_.resize(picked.size() + 1);
  units_[0].name = "";
  units_[0].module = &module;
  // cpu_offload matters only with a GPU: on the CPU everything already lives in host memory.
  const bool offload = options_.cpu_offload && !root_device().is_cpu();
  units_[0].flat = std::make_unique<detail::FlatParam>("<root>", std::move(root), shard_rank, shard_size_,
                                                        param_dtype_, root_device(), offload);
  for (size_t i = 0; i < picked.size(); ++i) {
    Unit& u = units_[i + 1];
    u.name = picked[i].first;
    u.module = picked[i].second;
    u.flat = std::make_unique<detail::FlatParam>(u.name, std::move(entries[i]), shard_rank, shard_size_, param_dtype_,
                                                 root_device(), offload);
    dynamic_cast<HookedModule*>(u.module)
        ->add_interceptor(std::make_shared<FSDPUnitInterceptor>(this, i + 1, alive_), /*priority=*/0);
  }
  for (size_t i = 0; i < units_.size(); ++i) install_grad_hooks(i);
  spdlog::info("FSDP {}: {} unit(s) + root, shard group {} x replicate {}, param dtype {}{}", options_.sharding_strategy,
               picked.size(), shard_size_, replicate_size_, c10::toString(param_dtype_),
               offload ? ", shards and optimizer state offloaded to pinned host memory" : "");
}

void FSDPStrategy::install_grad_hooks(size_t ui) {
  Unit& u = units_[ui];
  u.grads_expected = 0;
  u.has_frozen = false;
  std::weak_ptr<bool> alive = alive_;
  for (auto& e : u.flat->entries()) {
    if (!e.param.requires_grad()) {
      u.has_frozen = true;
      continue;
    }
    ++u.grads_expected;
    accumulators_.push_back(detail::add_grad_ready_hook(e.param, [this, ui, alive] {
      if (alive.expired() || ui >= units_.size()) return;
      if (--units_[ui].grads_pending == 0) on_unit_grads_ready(ui);
    }));
  }
}

void FSDPStrategy::setup_optimizer(LightningModule&, OptimizerConfig& config) {
  auto& opt = *config.optimizer;
  VOLT_CHECK(opt.state().empty(), ConfigError,
             "FSDP: the optimizer already has state; create it in configure_optimizers() without stepping it");
  // Every FSDP-managed parameter maps to its slices on this rank: possibly none (then it leaves
  // this rank's optimizer: another rank steps it).
  std::map<c10::TensorImpl*, std::vector<torch::Tensor>> slices;
  for (auto& u : units_) {
    for (auto& e : u.flat->entries()) slices[e.param.unsafeGetTensorImpl()];
    for (auto& s : u.flat->slices()) slices[u.flat->entries()[s.entry].param.unsafeGetTensorImpl()].push_back(s.view);
  }
  // Each parameter is replaced by this rank's slice of it; param groups (and their options) stay.
  for (auto& g : opt.param_groups()) {
    std::vector<torch::Tensor> params;
    for (auto& p : g.params()) {
      auto it = slices.find(p.unsafeGetTensorImpl());
      if (it == slices.end()) {
        params.push_back(p);
        continue;
      }
      for (auto& v : it->second) params.push_back(v);
    }
    g.params() = params;
  }
}

// ---------------------------------------------------------------------------------------------
// forward / backward

void FSDPStrategy::unshard(size_t ui) { units_[ui].flat->unshard(shard_pg()); }
void FSDPStrategy::reshard(size_t ui) { units_[ui].flat->reshard(); }

bool FSDPStrategy::may_prefetch() const {
  if (!options_.limit_all_gathers) return true;
  // At most two non-root units' parameters in flight (gathered or being gathered).
  int in_flight = 0;
  for (size_t i = 1; i < units_.size(); ++i)
    if (units_[i].flat->state() != detail::UnitState::Sharded) ++in_flight;
  return in_flight < 2;
}

void FSDPStrategy::prefetch_backward(size_t ui) {
  // The unit whose backward comes next: the one that ran just before `ui` in this step's forward.
  if (!may_prefetch()) return;
  auto it = std::find(current_order_.begin(), current_order_.end(), ui);
  if (it == current_order_.end() || it == current_order_.begin()) return;
  units_[*(it - 1)].flat->unshard_async(shard_pg());
}

void FSDPStrategy::prefetch_after(size_t ui, bool backward) {
  if (!may_prefetch()) return;
  if (backward) {
    if (options_.backward_prefetch == "BACKWARD_PRE") prefetch_backward(ui);
  } else {
    if (!options_.forward_prefetch || forward_order_.empty()) return;
    // The unit that ran after this one in the previous iteration.
    auto it = std::find(forward_order_.begin(), forward_order_.end(), ui);
    if (it == forward_order_.end() || it + 1 == forward_order_.end()) return;
    units_[*(it + 1)].flat->unshard_async(shard_pg());
  }
}

void FSDPStrategy::pre_forward(size_t ui) {
  unshard(ui);
  if (torch::GradMode::is_enabled()) current_order_.push_back(ui);
  prefetch_after(ui, false);
}

void FSDPStrategy::post_forward(size_t ui, const torch::Tensor& out) {
  const bool grad = torch::GradMode::is_enabled() && out.requires_grad();
  if (grad) {
    std::weak_ptr<bool> alive = alive_;
    // Pre-backward: gather again (if freed) before this unit's backward runs, prefetch the next.
    const_cast<torch::Tensor&>(out).register_hook([this, ui, alive](const torch::Tensor& g) {
      if (!alive.expired() && ui < units_.size()) {
        unshard(ui);
        prefetch_after(ui, true);
      }
      return g;
    });
  }
  if (!grad || frees_after_forward(options_.sharding_strategy)) reshard(ui);
}

void FSDPStrategy::on_unit_grads_ready(size_t ui) {
  Unit& u = units_[ui];
  if (u.reduced) return;
  // Without sync (an accumulation micro-step) the full gradients stay in param.grad and
  // accumulate; only the parameters are freed (see the header).
  if (sync_) u.flat->reduce_gradients(shard_pg(), replicate_pg(), reduce_dtype_, world_size());
  u.reduced = true;
  // A unit with a frozen parameter stays gathered until finish_backward: later backward nodes may
  // still read the frozen weight (e.g. for the input gradient) after all trainable grads arrived.
  if (ui != 0 && (!u.has_frozen || !in_backward_)) reshard(ui);
  // BACKWARD_POST: the next unit's gather starts once this unit's gradients are done (less overlap
  // than BACKWARD_PRE, one unit less in memory at the peak).
  if (in_backward_ && options_.backward_prefetch == "BACKWARD_POST") prefetch_backward(ui);
}

torch::Tensor FSDPStrategy::training_step(LightningModule& module, const Batch& batch, int64_t batch_idx) {
  current_order_.clear();
  unshard(0);
  return Strategy::training_step(module, batch, batch_idx);
}

void FSDPStrategy::validation_step(LightningModule& module, const Batch& batch, int64_t batch_idx) {
  unshard(0);
  Strategy::validation_step(module, batch, batch_idx);
  reshard(0);
}

void FSDPStrategy::test_step(LightningModule& module, const Batch& batch, int64_t batch_idx) {
  unshard(0);
  Strategy::test_step(module, batch, batch_idx);
  reshard(0);
}

void FSDPStrategy::backward(LightningModule&, const torch::Tensor& loss, bool sync_gradients) {
  sync_ = sync_gradients;
  for (auto& u : units_) {
    u.grads_pending = u.grads_expected;
    u.reduced = false;
  }
  in_backward_ = true;
  try {
    loss.backward();
  } catch (...) {
    in_backward_ = false;
    sync_ = true;
    throw;
  }
  in_backward_ = false;
  finish_backward();
  sync_ = true;
}

void FSDPStrategy::finish_backward() {
  if (sync_) {
    // Units some of whose parameters got no gradient (unused this step) and the root, in unit
    // index order: the same order on every rank, so the collectives line up.
    for (size_t i = 0; i < units_.size(); ++i)
      if (!units_[i].reduced) on_unit_grads_ready(i);
    // Offloaded gradient shards were copied to pinned host memory asynchronously: one wait for
    // all of them before the optimizer (on the host) reads them.
    if (std::any_of(units_.begin(), units_.end(), [](const Unit& u) { return u.flat->offloaded(); }))
      torch::cuda::synchronize(root_device().index());
    for (auto& u : units_) u.flat->expose_slice_grads();
  }
  for (size_t i = 0; i < units_.size(); ++i) reshard(i);
  forward_order_ = current_order_;
}

void FSDPStrategy::zero_grad(torch::optim::Optimizer& optimizer) {
  Strategy::zero_grad(optimizer);
  for (auto& u : units_) {
    u.flat->shard_grad() = torch::Tensor();
    for (auto& e : u.flat->entries()) e.param.mutable_grad() = torch::Tensor();
  }
}

double FSDPStrategy::reduce_grad_norm_sq(double local) {
  if (!shard_pg()) return local;
  torch::Tensor t = torch::tensor(local, torch::kDouble);
  shard_pg()->all_reduce(t, ReduceOp::Sum);
  return t.item<double>();
}

// ---------------------------------------------------------------------------------------------
// state

NamedTensors FSDPStrategy::optimizer_params(LightningModule&) {
  NamedTensors out;
  for (auto& u : units_)
    for (auto& s : u.flat->slices()) out.emplace_back(u.flat->entries()[s.entry].name, s.view);
  return out;
}

std::map<std::string, torch::Tensor> FSDPStrategy::model_state_dict(LightningModule& module) {
  if (units_.empty()) return Strategy::model_state_dict(module);  // not sharded (after teardown)
  std::map<std::string, torch::Tensor> out;
  for (auto& u : units_) {
    torch::Tensor full = u.flat->gather_full_fp32(shard_pg());
    for (auto& e : u.flat->entries()) out[e.name] = full.narrow(0, e.offset, e.numel).view(e.shape).clone().cpu();
  }
  for (auto& kv : module.named_buffers()) out[kv.key()] = kv.value().detach().cpu().clone();
  return out;
}

std::vector<std::string> FSDPStrategy::optimizer_fields(torch::optim::Optimizer& optimizer) {
  std::set<std::string> local;
  for_each_optimizer_state(optimizer, optimizer_params(*module_),
                           [&](const std::string&, const std::string& f, const torch::Tensor&) { local.insert(f); });
  torch::Tensor have = torch::zeros({static_cast<int64_t>(kStateFields.size())});
  for (size_t i = 0; i < kStateFields.size(); ++i)
    if (local.count(kStateFields[i])) have[static_cast<int64_t>(i)] = 1;
  if (world_size() > 1) process_group().all_reduce(have, ReduceOp::Max);
  std::vector<std::string> out;
  for (size_t i = 0; i < kStateFields.size(); ++i)
    if (have[static_cast<int64_t>(i)].item<float>() > 0) out.push_back(kStateFields[i]);
  return out;
}

namespace {

/// The padded flat buffer of a unit from every rank's `local` shard.
torch::Tensor gather_flat(ProcessGroup* pg, const torch::Tensor& local, int64_t padded) {
  if (pg == nullptr || pg->size() == 1) return local;
  torch::Tensor full = torch::empty({padded}, local.options());
  pg->all_gather(full, local);
  return full;
}

/// This rank's optimizer state `field` laid out as its shard (zeros where no slice has state).
torch::Tensor local_field(torch::optim::Optimizer& opt, detail::FlatParam& f, const std::string& field) {
  torch::Tensor local = torch::zeros({f.shard_numel()}, f.shard().options());
  for (auto& s : f.slices())
    for_each_optimizer_state(opt, {{f.entries()[s.entry].name, s.view}},
                             [&](const std::string&, const std::string& name, const torch::Tensor& t) {
                               if (name == field) local.narrow(0, s.shard_offset, s.length).copy_(t.reshape({-1}));
                             });
  return local;
}

/// Every unit's optimizer step count (`units`: FSDPStrategy's private Unit list): the same for every
/// slice of a unit; the maximum over slices and shard ranks guards against slices that never got a
/// gradient. One collective for all units.
template <class Units>
std::vector<int64_t> unit_steps(torch::optim::Optimizer& opt, Units& units, ProcessGroup* pg) {
  std::vector<double> local;
  for (auto& u : units) {
    double step = 0.0;
    for (auto& s : u.flat->slices())
      for_each_optimizer_state(opt, {{u.flat->entries()[s.entry].name, s.view}},
                               [&](const std::string&, const std::string& name, const torch::Tensor& t) {
                                 if (name == "step") step = std::max(step, t.item<double>());
                               });
    local.push_back(step);
  }
  torch::Tensor steps = torch::tensor(local, torch::kDouble);
  if (pg && !local.empty()) pg->all_reduce(steps, ReduceOp::Max);
  std::vector<int64_t> out;
  for (size_t u = 0; u < local.size(); ++u) out.push_back(static_cast<int64_t>(steps[u].item<double>()));
  return out;
}

}  // namespace

void FSDPStrategy::save_checkpoint(LightningModule& module, torch::optim::Optimizer* optimizer,
                                   const Checkpoint& header, const std::string& path) {
  if (units_.empty()) return Strategy::save_checkpoint(module, optimizer, header, path);
  if (options_.state_dict_type == "sharded")
    save_sharded(module, optimizer, header, path);
  else
    save_full(module, optimizer, header, path);
}

void FSDPStrategy::save_full(LightningModule& module, torch::optim::Optimizer* optimizer, const Checkpoint& header,
                             const std::string& path) {
  torch::NoGradGuard ng;
  auto rng = gather_rank_tensors(header.rng_states);
  const auto fields = optimizer ? optimizer_fields(*optimizer) : std::vector<std::string>{};
  const bool writer = is_global_zero();
  std::unique_ptr<ArchiveWriter> w;
  std::string error;
  // Rank 0 keeps taking part in the gathers after a failed write, so no rank hangs; all learn of
  // the failure at the end.
  auto guarded = [&](const std::function<void()>& fn) {
    if (!writer || !error.empty()) return;
    try {
      fn();
    } catch (const std::exception& e) {
      error = e.what();
      w.reset();
    }
  };
  guarded([&] { w = std::make_unique<ArchiveWriter>(path); });
  const bool has_step = std::count(fields.begin(), fields.end(), "step") > 0;
  const std::vector<int64_t> steps =
      has_step ? unit_steps(*optimizer, units_, shard_pg()) : std::vector<int64_t>{};
  for (size_t ui = 0; ui < units_.size(); ++ui) {
    auto& f = *units_[ui].flat;
    {
      torch::Tensor full = f.gather_full_fp32(shard_pg());
      guarded([&] {
        for (auto& e : f.entries()) w->add(kModelSection, e.name, full.narrow(0, e.offset, e.numel).view(e.shape));
      });
    }  // one unit's gathered values at a time
    for (const auto& field : fields) {
      if (field == "step") {
        guarded([&] {
          for (auto& e : f.entries())
            w->add(kOptimizerSection, e.name + ".step", torch::tensor(steps[ui], torch::kLong));
        });
        continue;
      }
      torch::Tensor full = gather_flat(shard_pg(), local_field(*optimizer, f, field), f.padded_numel());
      guarded([&] {
        for (auto& e : f.entries())
          w->add(kOptimizerSection, e.name + "." + field, full.narrow(0, e.offset, e.numel).view(e.shape));
      });
    }
  }
  guarded([&] {
    for (auto& kv : module.named_buffers()) w->add(kModelSection, kv.key(), kv.value());
    for (const auto& [k, v] : rng) w->add(kRngSection, k, v);
    w->commit(detail::checkpoint_fields(header), detail::checkpoint_index_meta(header));
  });
  detail::agree_or_throw(*this, error, "saving checkpoint '" + path + "'");
}

void FSDPStrategy::save_sharded(LightningModule& module, torch::optim::Optimizer* optimizer, const Checkpoint& header,
                                const std::string& path) {
  torch::NoGradGuard ng;
  const auto fields = optimizer ? optimizer_fields(*optimizer) : std::vector<std::string>{};
  // Per unit (a collective within the shard group).
  const bool has_step = std::count(fields.begin(), fields.end(), "step") > 0;
  const std::vector<int64_t> steps =
      has_step ? unit_steps(*optimizer, units_, shard_pg()) : std::vector<int64_t>{};
  ShardedCheckpointWriter sw(path, global_rank(), world_size(), [this](const std::string& error, const std::string& what) {
    detail::agree_or_throw(*this, error, what);
  });
  std::string error;
  try {
    ArchiveWriter& file = sw.file();
    // The first replica (global ranks 0 .. shard size - 1; shard index = rank) writes the parameters
    // and optimizer state; every rank writes its own RNG states.
    const bool writes_params = global_rank() < shard_size_;
    for (size_t ui = 0; ui < units_.size(); ++ui) {
      auto& f = *units_[ui].flat;
      if (writes_params)
        for (auto& s : f.slices()) {
          const auto& e = f.entries()[s.entry];
          file.add(kModelSection, e.name, f.shard().narrow(0, s.shard_offset, s.length));
          for (const auto& field : fields) {
            if (field == "step") {
              file.add(kOptimizerSection, e.name + ".step", torch::tensor(steps[ui], torch::kLong));
              continue;
            }
            for_each_optimizer_state(*optimizer, {{e.name, s.view}},
                                     [&](const std::string&, const std::string& name, const torch::Tensor& t) {
                                       if (name == field) file.add(kOptimizerSection, e.name + "." + field, t.reshape({-1}));
                                     });
          }
        }
      if (global_rank() != 0) continue;
      // The manifest: where every rank's pieces of every parameter are (the layout is the same
      // arithmetic on every rank: shard q holds flat elements [q * S, (q + 1) * S)).
      const int64_t S = f.shard_numel();
      for (const auto& e : f.entries())
        for (int64_t q = 0; q < shard_size_; ++q) {
          const int64_t lo = std::max(e.offset, q * S), hi = std::min(e.offset + e.numel, (q + 1) * S);
          if (lo >= hi) continue;
          sw.declare(kModelSection, e.name, at::kFloat, e.shape, q, lo - e.offset, hi - lo);
          for (const auto& field : fields) {
            if (field == "step") {
              if (lo == e.offset) sw.declare(kOptimizerSection, e.name + ".step", at::kLong, {}, q, 0, 1);  // once
            } else
              sw.declare(kOptimizerSection, e.name + "." + field, at::kFloat, e.shape, q, lo - e.offset, hi - lo);
          }
        }
    }
    if (global_rank() == 0)
      for (auto& kv : module.named_buffers()) {
        file.add(kModelSection, kv.key(), kv.value());
        sw.declare(kModelSection, kv.key(), kv.value().scalar_type(), kv.value().sizes().vec(), 0, 0, kv.value().numel());
      }
    for (const auto& [k, v] : header.rng_states) {
      file.add(kRngSection, "rank" + std::to_string(global_rank()) + "." + k, v);
      if (global_rank() == 0)  // every rank's generators have the same state size
        for (int64_t r = 0; r < world_size(); ++r)
          sw.declare(kRngSection, "rank" + std::to_string(r) + "." + k, v.scalar_type(), v.sizes().vec(), r, 0, v.numel());
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  sw.commit(header, error);
}

void FSDPStrategy::load_checkpoint(LightningModule& module, torch::optim::Optimizer* optimizer,
                                   const CheckpointReader& ckpt) {
  if (units_.empty()) return Strategy::load_checkpoint(module, optimizer, ckpt);
  torch::NoGradGuard ng;
  std::vector<std::pair<std::string, std::vector<int64_t>>> expected;
  for (auto& u : units_)
    for (auto& e : u.flat->entries()) expected.emplace_back(e.name, e.shape);
  for (auto& kv : module.named_buffers()) expected.emplace_back(kv.key(), kv.value().sizes().vec());
  detail::check_checkpoint_model(ckpt, expected);
  // Just this rank's ranges: a full file is read in pieces, a sharded folder through its manifest.
  for (auto& u : units_) {
    auto& f = *u.flat;
    auto& shard = const_cast<torch::Tensor&>(f.shard());
    for (auto& s : f.slices())
      shard.narrow(0, s.shard_offset, s.length)
          .copy_(ckpt.read_flat(kModelSection, f.entries()[s.entry].name, s.param_offset, s.length));
  }
  for (auto& kv : module.named_buffers()) kv.value().copy_(ckpt.read(kModelSection, kv.key()));
  if (!optimizer || ckpt.names(kOptimizerSection).empty()) return;
  // Unit by unit: at most one unit's optimizer state is in flight besides the optimizer's own.
  for (auto& u : units_) {
    auto& f = *u.flat;
    std::map<std::string, torch::Tensor> local;
    NamedTensors params;
    for (auto& s : f.slices()) {
      const auto& e = f.entries()[s.entry];
      params.emplace_back(e.name, s.view);
      for (const auto& field : kStateFields) {
        const std::string key = e.name + "." + field;
        if (!ckpt.has(kOptimizerSection, key)) continue;
        if (field == "step") {
          local[key] = ckpt.read(kOptimizerSection, key);
          continue;
        }
        VOLT_CHECK(ckpt.tensor(kOptimizerSection, key).numel == e.numel, CheckpointError, ckpt.path(),
                   ": optimizer state '", key, "' has ", ckpt.tensor(kOptimizerSection, key).numel,
                   " elements, the parameter ", e.numel);
        local[key] = ckpt.read_flat(kOptimizerSection, key, s.param_offset, s.length);
      }
    }
    optimizer_state_from_tensors(*optimizer, params, local, ckpt.path());
  }
}

void FSDPStrategy::teardown(LightningModule& module) {
  if (units_.empty()) return Strategy::teardown(module);
  // Give every parameter its own full storage again, with the trained values.
  torch::NoGradGuard ng;
  for (auto& u : units_) {
    torch::Tensor full = u.flat->gather_full_fp32(shard_pg());
    for (auto& e : u.flat->entries()) {
      e.param.mutable_grad() = torch::Tensor();
      e.param.set_data(
          full.narrow(0, e.offset, e.numel).view(e.shape).to(root_device(), precision_.param_dtype()).clone());
    }
    if (u.module && u.module != &module)
      if (auto* h = dynamic_cast<HookedModule*>(u.module)) h->remove_interceptors("fsdp");
  }
  alive_ = std::make_shared<bool>(true);
  accumulators_.clear();
  units_.clear();
  forward_order_.clear();
  current_order_.clear();
  Strategy::teardown(module);
}

std::vector<FSDPStrategy::UnitInfo> FSDPStrategy::units() const {
  std::vector<UnitInfo> out;
  for (const auto& u : units_)
    out.push_back({u.name, u.flat->numel(), u.flat->padded_numel(), u.flat->shard_numel(), u.flat->unsharded_bytes()});
  return out;
}

std::string FSDPStrategy::describe_module(LightningModule&) {
  std::ostringstream os;
  os << "FSDP units (" << options_.sharding_strategy << ", shard group " << shard_size_ << ", replicate "
     << replicate_size_ << "):\n";
  os << "  " << std::left << std::setw(44) << "Unit" << std::right << std::setw(12) << "Params" << std::setw(12)
     << "Shard" << std::setw(14) << "MB/rank*" << '\n';
  int64_t total = 0, shard = 0;
  for (const auto& u : units_) {
    const double mb = static_cast<double>(u.flat->shard_numel()) * 16 / 1e6;
    os << "  " << std::left << std::setw(44) << (u.name.empty() ? "<root>" : u.name) << std::right << std::setw(12)
       << u.flat->numel() << std::setw(12) << u.flat->shard_numel() << std::setw(14) << std::fixed
       << std::setprecision(2) << mb << '\n';
    total += u.flat->numel();
    shard += u.flat->shard_numel();
  }
  os << "  total " << total << " params; this rank holds " << shard << " (" << std::fixed << std::setprecision(2)
     << 100.0 * shard / std::max<int64_t>(1, total) << "%)\n"
     << "  * 16 bytes per sharded parameter: fp32 weight + gradient + Adam's two moments\n";
  return os.str();
}

}  // namespace volt
