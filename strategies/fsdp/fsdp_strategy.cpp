#include "volt/strategies/fsdp/fsdp_strategy.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <iomanip>
#include <set>
#include <sstream>
#include <typeinfo>

#include "volt/core/compat.h"
#include "volt/core/errors.h"
#include "volt/module/lightning_module.h"
#include "volt/strategies/module_policy.h"

namespace volt {

namespace {
FSDPOptions validated(FSDPOptions o) {
  o.validate();  // before the mesh reads the sharding strategy
  return o;
}

/// A checksum of a tensor's bits: the sum of its elements read as integers of the same width
/// (modulo 2^64, so the order of summation does not matter and every rank computes the same).
int64_t bit_sum(const torch::Tensor& t) {
  torch::Tensor c = t.detach().cpu().contiguous();
  switch (c.element_size()) {
    case 1:
      return c.view(torch::kByte).sum(torch::kLong).item<int64_t>();
    case 2:
      return c.view(torch::kShort).sum(torch::kLong).item<int64_t>();
    case 4:
      return c.view(torch::kInt).sum(torch::kLong).item<int64_t>();
    case 8:
      return c.view(torch::kLong).sum(torch::kLong).item<int64_t>();
    default:
      return c.view(torch::kByte).sum(torch::kLong).item<int64_t>();
  }
}
}  // namespace

void FSDPStrategy::agree_on_states(const std::vector<std::pair<std::string, torch::Tensor>>& states) {
  if (states.empty() || world_size() == 1) return;
  torch::NoGradGuard ng;
  if (options_.sync_module_states) {
    for (const auto& [name, t] : states) {
      torch::Tensor d = t.detach();
      process_group().broadcast(d, 0);
    }
    return;
  }
  // One all-reduce (max) of each tensor's checksum and of its complement: the ranks agree on a
  // tensor exactly when max == min, and every rank reaches the same verdict before anyone throws.
  std::vector<int64_t> sums;
  for (const auto& st : states) sums.push_back(bit_sum(st.second));
  const size_t n = sums.size();
  std::vector<int64_t> both(sums);
  for (int64_t v : sums) both.push_back(~v);
  torch::Tensor t = torch::tensor(both, torch::kLong);
  process_group().all_reduce(t, ReduceOp::Max);
  auto a = t.accessor<int64_t, 1>();
  std::vector<std::string> differ;
  for (size_t i = 0; i < n; ++i)
    if (a[i] != ~a[n + i]) differ.push_back(states[i].first);
  if (differ.empty()) return;
  throw ConfigError(detail::str_cat(
      "FSDP: the ranks' initial values of '", differ.front(), "'",
      differ.size() > 1 ? detail::str_cat(" and ", differ.size() - 1, " more parameter(s)/buffer(s)") : "",
      " differ, and config key 'trainer.strategy.sync_module_states' is false, so nothing is broadcast: each "
      "rank's shard would come from a different model. Set trainer.strategy.sync_module_states: true to start "
      "every rank from rank 0's values, or build the model from the same seed (or checkpoint) on every rank"));
}

std::set<c10::TensorImpl*> FSDPStrategy::wrapped_params() const {
  std::set<c10::TensorImpl*> out;
  for (const auto& w : wrapped_)
    for (auto& e : w.flat->entries()) out.insert(e.param.unsafeGetTensorImpl());
  return out;
}

std::unique_ptr<detail::FlatParam> FSDPStrategy::make_flat(const std::string& name,
                                                           std::vector<detail::FlatParamEntry> entries) {
  // cpu_offload moves shards off the device only with a GPU (on the CPU everything already lives in
  // host memory); there it still makes the shards exact-size host buffers (FlatParam).
  const bool offload = options_.cpu_offload;
  // Under a "-true" precision the model's own dtype is 16-bit: the shards keep it (2 bytes per
  // parameter, as Lightning's FSDP with bf16-true); otherwise fp32 master weights.
  const at::ScalarType shard_dtype = precision_.param_dtype();
  return std::make_unique<detail::FlatParam>(name, std::move(entries), mesh_.shard_rank(), mesh_.shard_size(),
                                             param_dtype_, root_device(), offload, shard_dtype);
}

void FSDPStrategy::wrap(torch::nn::Module& unit) {
  VOLT_CHECK(!schedule_, ConfigError,
             "FSDP: wrap() is for configure_model(), while the model is being built; this model is already sharded");
  for (const auto& w : wrapped_)
    VOLT_CHECK(w.module.get() != &unit, ConfigError, "FSDP: wrap() was called twice on the same '", unit.name(),
               "' module");
  // The policy decides which wrapped modules are units (its predicate sees no name yet: the
  // module's place in the model is known only once the model is complete).
  if (options_.auto_wrap_policy.empty() || !policy_selects(options_.auto_wrap_policy, unit, "")) return;
  torch::NoGradGuard ng;
  // The unit's own parameters: not those of units wrapped inside it already (sharded, claimed).
  std::set<c10::TensorImpl*> claimed = wrapped_params();
  std::vector<detail::FlatParamEntry> entries;
  std::vector<std::pair<std::string, torch::Tensor>> states;
  for (const auto& kv : unit.named_parameters()) {
    if (!claimed.insert(kv.value().unsafeGetTensorImpl()).second) continue;
    entries.push_back({kv.key(), kv.value()});
    states.emplace_back(kv.key(), kv.value());
  }
  for (const auto& kv : unit.named_buffers()) states.emplace_back(kv.key(), kv.value());
  agree_on_states(states);
  std::shared_ptr<torch::nn::Module> owned = unit.weak_from_this().lock();
  VOLT_CHECK(owned != nullptr, ConfigError,
             "FSDP: wrap() needs a module owned by a shared_ptr (a ModuleHolder such as ",
             "volt::hooked(...), or std::make_shared), as register_module does; '", unit.name(), "' is not");
  wrapped_.push_back({std::move(owned), make_flat(unit.name(), std::move(entries))});
}

FSDPStrategy::FSDPStrategy(Precision precision, std::string accelerator, int64_t devices, int64_t num_nodes,
                           FSDPOptions options)
    : ParallelStrategy(std::move(precision), std::move(accelerator), devices, num_nodes,
                       std::chrono::seconds(options.timeout), options.process_group_backend),
      options_(validated(std::move(options))),
      mesh_(options_, devices, num_nodes) {
  // Mixed precision: derived from the Trainer's precision unless given explicitly.
  const bool bf16 = precision_.compute_dtype() == at::kBFloat16 || precision_.compute_dtype() == at::kHalf;
  param_dtype_ = options_.param_dtype
                     ? Precision::dtype_from_name(*options_.param_dtype, "trainer.strategy.param_dtype")
                     : (bf16 ? precision_.compute_dtype() : at::kFloat);
  reduce_dtype_ = options_.reduce_dtype
                      ? Precision::dtype_from_name(*options_.reduce_dtype, "trainer.strategy.reduce_dtype")
                      : param_dtype_;
  if (options_.buffer_dtype)
    buffer_dtype_ = Precision::dtype_from_name(*options_.buffer_dtype, "trainer.strategy.buffer_dtype");
  VOLT_CHECK(accelerator_ != "cpu" || compat::kCpuHalfMatmul || param_dtype_ != at::kHalf, ConfigError,
             "config key 'trainer.strategy.param_dtype': float16 has no CPU matmul kernels in this LibTorch; use "
             "bfloat16 on the CPU (or accelerator: cuda)");
}

FSDPStrategy::~FSDPStrategy() = default;

void FSDPStrategy::setup_environment() {
  ParallelStrategy::setup_environment();
  mesh_.connect(device_mesh());
}

MeshLayout FSDPStrategy::mesh_layout() const { return mesh_.layout(); }

namespace {
/// Which modules hold each parameter directly, by their paths in the model.
class ParamOwners {
 public:
  explicit ParamOwners(torch::nn::Module& model) {
    // include_self would need the model to be owned by a shared_ptr (LibTorch's shared_from_this).
    for (const auto& p : model.named_parameters(/*recurse=*/false))
      owners_[p.value().unsafeGetTensorImpl()].push_back("");
    for (const auto& item : model.named_modules("", /*include_self=*/false))
      for (const auto& p : item.value()->named_parameters(/*recurse=*/false))
        owners_[p.value().unsafeGetTensorImpl()].push_back(item.key());
  }
  /// The path of a module holding `param` outside the subtree at `unit` ("" when none; the
  /// root unit "" contains every module).
  std::string outside(const torch::Tensor& param, const std::string& unit) const {
    auto it = owners_.find(param.unsafeGetTensorImpl());
    if (it == owners_.end() || unit.empty()) return {};
    for (const auto& path : it->second)
      if (path != unit && path.rfind(unit + ".", 0) != 0) return path.empty() ? "<root>" : path;
    return {};
  }

 private:
  std::map<const c10::TensorImpl*, std::vector<std::string>> owners_;
};
}  // namespace

std::vector<detail::FSDPUnit> FSDPStrategy::make_units(LightningModule& module) {
  // Units wrap() made while the model was built: named now that it is complete.
  std::map<const torch::nn::Module*, std::string> paths;
  for (const auto& item : module.named_modules("", /*include_self=*/false)) paths[item.value().get()] = item.key();
  std::set<c10::TensorImpl*> claimed = wrapped_params();
  // [Note: tied weights] A parameter held by several modules (tied embeddings) belongs to the
  // innermost unit that contains every module holding it, their common ancestor's unit, as in
  // FSDP2: a unit that held it alone would free it while a module outside still reads it.
  const ParamOwners owners(module);
  std::set<const torch::nn::Module*> wrapped_modules;
  std::vector<detail::FSDPUnit> wrapped;
  for (auto& w : wrapped_) {
    auto it = paths.find(w.module.get());
    VOLT_CHECK(it != paths.end(), ConfigError, "FSDP: a module given to wrap() ('", w.module->name(),
               "') is not part of the model; register it (register_module, a ModuleList) before configure_model() "
               "returns");
    for (auto& e : w.flat->entries()) {
      const std::string outside = owners.outside(e.param, it->second);
      VOLT_CHECK(outside.empty(), ConfigError, "FSDP: parameter '", it->second, ".", e.name, "' of unit '", it->second,
                 "' is shared with '", outside,
                 "' outside that unit (tied weights), but wrap() sharded the unit before the model was complete. "
                 "Let trainer.strategy.auto_wrap_policy pick this module instead of wrap() (the tied weight then "
                 "goes to the unit of the modules' common ancestor), or keep the modules that share it in one unit");
      e.name = it->second + "." + e.name;
    }
    wrapped_modules.insert(w.module.get());
    wrapped.emplace_back(it->second, w.module.get(), std::move(w.flat));
  }
  wrapped_.clear();
  // Then the units the policy picks (unless wrap() made them already); inner units claim their
  // parameters first.
  std::vector<std::pair<std::string, torch::nn::Module*>> picked;
  if (!options_.auto_wrap_policy.empty())
    for (auto& p : select_modules(module, options_.auto_wrap_policy, "trainer.strategy.auto_wrap_policy", "FSDP"))
      if (!wrapped_modules.count(p.second)) picked.push_back(p);
  std::vector<std::vector<detail::FlatParamEntry>> entries(picked.size());
  for (size_t i = picked.size(); i-- > 0;) {
    for (const auto& kv : picked[i].second->named_parameters()) {
      if (!owners.outside(kv.value(), picked[i].first).empty()) continue;  // tied: an enclosing unit's
      if (!claimed.insert(kv.value().unsafeGetTensorImpl()).second) continue;
      entries[i].push_back({picked[i].first + "." + kv.key(), kv.value()});
    }
  }
  std::vector<detail::FlatParamEntry> root;
  for (const auto& kv : module.named_parameters())
    // insert, not count: a shared (tied) parameter listed twice becomes one flat entry.
    if (claimed.insert(kv.value().unsafeGetTensorImpl()).second) root.push_back({kv.key(), kv.value()});
  std::vector<detail::FSDPUnit> units;
  units.emplace_back("", &module, make_flat("<root>", std::move(root)));
  for (auto& u : wrapped) units.push_back(std::move(u));
  for (size_t i = 0; i < picked.size(); ++i)
    units.emplace_back(picked[i].first, picked[i].second, make_flat(picked[i].first, std::move(entries[i])));
  return units;
}

void FSDPStrategy::setup_module(LightningModule& module) {
  if (schedule_ && sharded_ == &module) {
    // Kept sharded since the last fit/validate/test of this Trainer: the shards are the state.
    VOLT_CHECK(wrapped_.empty(), ConfigError,
               "FSDP: configure_model() wrapped new layers into a model that is already sharded; make it "
               "idempotent (build the layers only when they do not exist yet), as Lightning requires");
    for (auto& u : schedule_->units()) u.flat->bind_params();
    Strategy::setup_module(module);
    return;
  }
  if (schedule_) unshard_module(*sharded_);  // another module: give the old one back whole first
  Strategy::setup_module(module);
  // Before sharding: sync_module_states broadcasts rank 0's parameters and buffers (PyTorch's
  // meaning); without it the ranks must already agree, which one small collective checks. Units
  // wrap() sharded already agreed then.
  {
    const std::set<c10::TensorImpl*> done = wrapped_params();
    std::vector<std::pair<std::string, torch::Tensor>> states;
    for (const auto& kv : module.named_parameters())
      if (!done.count(kv.value().unsafeGetTensorImpl())) states.emplace_back(kv.key(), kv.value());
    for (const auto& kv : module.named_buffers()) states.emplace_back(kv.key(), kv.value());
    agree_on_states(states);
  }
  if (buffer_dtype_) {
    // After the broadcast (Gloo cannot send bf16): buffers keep their identity, change dtype.
    torch::NoGradGuard ng;
    for (auto& kv : module.named_buffers()) kv.value().set_data(kv.value().to(*buffer_dtype_));
  }
  detail::FSDPScheduleOptions so;
  const ShardingStrategy s = options_.sharding_strategy.value();
  so.free_after_forward = s == ShardingStrategy::FullShard || s == ShardingStrategy::HybridShard;
  so.backward_prefetch = options_.backward_prefetch.value();
  so.forward_prefetch = options_.forward_prefetch;
  so.limit_all_gathers = options_.limit_all_gathers;
  so.reduce_dtype = reduce_dtype_;
  so.world_size = world_size();
  so.device = root_device();
  so.profiler = profiler_;
  schedule_ = std::make_unique<detail::FSDPSchedule>(so, mesh_);
  schedule_->install(make_units(module));
  sharded_ = &module;
  const bool offload = schedule_->units()[0].flat->offloaded();
  spdlog::info("FSDP {}: {} unit(s) + root, shard group {} x replicate {}, param dtype {}{}",
               options_.sharding_strategy.text(), schedule_->units().size() - 1, mesh_.shard_size(),
               mesh_.replicate_size(), c10::toString(param_dtype_),
               offload ? ", shards and optimizer state offloaded to pinned host memory" : "");
}

void FSDPStrategy::setup_optimizer(LightningModule&, OptimizerConfig& config) {
  auto& opt = *config.optimizer;
  VOLT_CHECK(opt.state().empty(), ConfigError,
             "FSDP: the optimizer already has state; create it in configure_optimizers() without stepping it");
  // Every FSDP-managed parameter maps to its slices on this rank: possibly none (then it leaves
  // this rank's optimizer: another rank steps it).
  std::map<c10::TensorImpl*, std::vector<torch::Tensor>> slices;
  for (auto& u : schedule_->units()) {
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
  if (options_.optimizer_in_backward) {
    // LBFGS's step re-evaluates the whole model (a closure): it cannot step unit by unit.
    VOLT_CHECK(typeid(opt) != typeid(torch::optim::LBFGS), ConfigError,
               "config key 'trainer.strategy.optimizer_in_backward': LBFGS steps the whole model at once (with a "
               "closure) and cannot step one unit at a time; turn optimizer_in_backward off");
    stepper_ = std::make_unique<detail::BackwardStepper>(
        config.optimizer, detail::BackwardStepperOptions{options_.cpu_offload, clip_value_});
    schedule_->set_stepper(stepper_.get());
  }
}

void FSDPStrategy::set_clip_value_in_backward(std::optional<double> value) {
  clip_value_ = value;
  if (stepper_) stepper_->set_clip_value(value);
}

void FSDPStrategy::run_optimizer_step(torch::optim::Optimizer& optimizer) {
  if (stepper_ && &stepper_->optimizer() == &optimizer) return;  // every unit stepped inside backward
  Strategy::run_optimizer_step(optimizer);
}

// ---------------------------------------------------------------------------------------------
// steps

torch::Tensor FSDPStrategy::training_step(LightningModule& module, const Batch& batch, int64_t batch_idx) {
  schedule_->begin_training_step();
  if (module.automatic_optimization) return Strategy::training_step(module, batch, batch_idx);
  // Manual optimization: backward (which reshards every unit) and optimizer steps run inside the
  // step, and forwards follow them; the root is gathered again after each (see run_backward and
  // after_optimizer_step) and freed when the step returns.
  manual_step_ = true;
  torch::Tensor loss;
  try {
    loss = Strategy::training_step(module, batch, batch_idx);
  } catch (...) {
    manual_step_ = false;
    throw;
  }
  manual_step_ = false;
  schedule_->reshard_root();
  return loss.defined() ? loss.detach() : loss;
}

void FSDPStrategy::after_optimizer_step() {
  schedule_->reshard_units();
  if (manual_step_) schedule_->refresh_root();  // the gathered root holds the values before the step
}

void FSDPStrategy::validation_step(LightningModule& module, const Batch& batch, int64_t batch_idx,
                                   int64_t dataloader_idx) {
  schedule_->with_root_gathered([&] { Strategy::validation_step(module, batch, batch_idx, dataloader_idx); });
}

void FSDPStrategy::test_step(LightningModule& module, const Batch& batch, int64_t batch_idx, int64_t dataloader_idx) {
  schedule_->with_root_gathered([&] { Strategy::test_step(module, batch, batch_idx, dataloader_idx); });
}

Batch FSDPStrategy::predict_step(LightningModule& module, const Batch& batch, int64_t batch_idx,
                                 int64_t dataloader_idx) {
  Batch out;
  schedule_->with_root_gathered([&] { out = Strategy::predict_step(module, batch, batch_idx, dataloader_idx); });
  return out;
}

void FSDPStrategy::run_backward(LightningModule&, const torch::Tensor& loss, bool sync_gradients) {
  schedule_->backward(loss, sync_gradients);
  if (manual_step_) schedule_->unshard_root();  // a later forward in the same manual step needs it
}

void FSDPStrategy::zero_grad(torch::optim::Optimizer& optimizer) {
  Strategy::zero_grad(optimizer);
  schedule_->zero_grad(optimizer);
}

double FSDPStrategy::reduce_grad_norm_sq(double local) {
  ProcessGroup* pg = mesh_.shard_group();
  if (!pg) return local;
  torch::Tensor t = torch::tensor(local, torch::kDouble);
  pg->all_reduce(t, ReduceOp::Sum);
  return t.item<double>();
}

// ---------------------------------------------------------------------------------------------
// state

std::map<std::string, torch::Tensor> FSDPStrategy::model_state_dict(LightningModule& module) {
  if (!schedule_) return Strategy::model_state_dict(module);  // not sharded (after teardown)
  std::map<std::string, torch::Tensor> out;
  std::map<const c10::TensorImpl*, std::string> entry_of;
  for (auto& u : schedule_->units()) {
    torch::Tensor full = u.flat->gather_full(mesh_.shard_group());
    for (auto& e : u.flat->entries()) {
      out[e.name] = full.narrow(0, e.offset, e.numel).view(e.shape).clone().cpu();
      entry_of[e.param.unsafeGetTensorImpl()] = e.name;
    }
  }
  // A tied weight is one flat entry; its other names are exported too, as one process exports them.
  for (auto& kv : module.named_parameters()) {
    auto it = entry_of.find(kv.value().unsafeGetTensorImpl());
    if (!out.count(kv.key()) && it != entry_of.end()) out[kv.key()] = out[it->second];
  }
  for (auto& kv : module.named_buffers()) out[kv.key()] = kv.value().detach().cpu().clone();
  return out;
}

StateLayout FSDPStrategy::state_layout(LightningModule& module, const OptimizerList& optimizers) {
  if (!schedule_) return Strategy::state_layout(module, optimizers);
  StateLayout l;
  l.optimizers = optimizers;
  for (auto& kv : module.named_buffers()) l.buffers.emplace_back(kv.key(), kv.value());
  ProcessGroup* pg = mesh_.shard_group();
  // The first replica (global ranks 0 .. shard size - 1; shard index = rank) writes the pieces.
  const bool writes = global_rank() < mesh_.shard_size();
  for (auto& u : schedule_->units()) {
    detail::FlatParam& f = *u.flat;
    FlatGroup g;
    for (const auto& e : f.entries()) g.entries.push_back({e.name, e.shape, e.offset, e.numel});
    for (const auto& s : f.slices()) g.slices.push_back({s.entry, s.shard_offset, s.param_offset, s.length, s.view});
    g.shard = f.shard();
    g.shard_numel = f.shard_numel();
    g.shard_size = mesh_.shard_size();
    g.shard_index = mesh_.shard_rank();
    g.writes = writes;
    const int64_t padded = f.padded_numel();
    g.gather = [pg, padded](const torch::Tensor& local) {
      if (pg == nullptr || pg->size() == 1) return local;
      torch::Tensor full = torch::empty({padded}, local.options());
      pg->all_gather(full, local);
      return full;
    };
    g.all_reduce = [pg](const torch::Tensor& t, ReduceOp op) {
      if (pg == nullptr) return t;
      torch::Tensor c = t.clone();
      pg->all_reduce(c, op);
      return c;
    };
    l.groups.push_back(std::move(g));
  }
  return l;
}

void FSDPStrategy::teardown(LightningModule& module) {
  wrapped_.clear();  // units of a configure_model() that failed before set-up
  if (schedule_) schedule_->set_stepper(nullptr);
  stepper_.reset();  // its optimizer belongs to the fit that ends
  if (schedule_) {
    // No gathering: the module stays sharded (its state can be streamed out unit by unit with
    // model_state_dict or a checkpoint, and a later validate/test/predict/fit of this Trainer uses
    // the shards as they are); unshard_module() gives it back whole when asked.
    for (auto& u : schedule_->units()) u.flat->release_params();
  }
  Strategy::teardown(module);
}

void FSDPStrategy::unshard_module(LightningModule& module) {
  if (!schedule_ || sharded_ != &module) return;
  // Every parameter gets its own full storage again, with the trained values: one unit at a time.
  torch::NoGradGuard ng;
  schedule_->set_stepper(nullptr);
  stepper_.reset();
  std::vector<detail::FSDPUnit> units = schedule_->uninstall();
  for (auto& u : units) {
    torch::Tensor full = u.flat->gather_full(mesh_.shard_group());
    for (auto& e : u.flat->entries()) {
      e.param.mutable_grad() = torch::Tensor();
      e.param.set_data(
          full.narrow(0, e.offset, e.numel).view(e.shape).to(root_device(), precision_.param_dtype()).clone());
    }
  }
  schedule_.reset();
  sharded_ = nullptr;
  Strategy::teardown(module);
}

std::vector<FSDPStrategy::UnitInfo> FSDPStrategy::units() const {
  std::vector<UnitInfo> out;
  if (!schedule_) return out;
  for (const auto& u : schedule_->units())
    out.push_back({u.name, u.flat->numel(), u.flat->padded_numel(), u.flat->shard_numel(), u.flat->unsharded_bytes(),
                   static_cast<size_t>(u.flat->shard().nbytes())});
  return out;
}

std::string FSDPStrategy::describe_module(LightningModule&) {
  std::ostringstream os;
  os << "FSDP units (" << options_.sharding_strategy << ", shard group " << mesh_.shard_size() << ", replicate "
     << mesh_.replicate_size() << "):\n";
  os << "  " << std::left << std::setw(44) << "Unit" << std::right << std::setw(12) << "Params" << std::setw(12)
     << "Shard" << std::setw(14) << "MB/rank*" << '\n';
  int64_t total = 0, shard = 0;
  for (const auto& u : units()) {
    const double mb = static_cast<double>(u.shard_numel) * 16 / 1e6;
    os << "  " << std::left << std::setw(44) << (u.name.empty() ? "<root>" : u.name) << std::right << std::setw(12)
       << u.numel << std::setw(12) << u.shard_numel << std::setw(14) << std::fixed << std::setprecision(2) << mb
       << '\n';
    total += u.numel;
    shard += u.shard_numel;
  }
  os << "  total " << total << " params; this rank holds " << shard << " (" << std::fixed << std::setprecision(2)
     << 100.0 * shard / std::max<int64_t>(1, total) << "%)\n"
     << "  * 16 bytes per sharded parameter: fp32 weight + gradient + Adam's two moments\n";
  return os.str();
}

}  // namespace volt
