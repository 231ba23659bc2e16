// FSDPStrategy: the Strategy overrides that wire FSDP's parts together. Each concern lives in a file
// of its own (fsdp_strategy.h lists them); this file only says when each runs.
#include "volt/strategies/fsdp/fsdp_strategy.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <iomanip>
#include <set>
#include <sstream>
#include <typeinfo>

#include "volt/core/errors.h"
#include "volt/module/lightning_module.h"
#include "volt/strategies/fsdp/fsdp_state_layout.h"
#include "volt/strategies/fsdp/optimizer_shards.h"

namespace volt {

namespace {
FSDPOptions validated(FSDPOptions o) {
  o.validate();  // before the mesh reads the sharding strategy
  return o;
}
}  // namespace

FSDPStrategy::FSDPStrategy(Precision precision, std::string accelerator, int64_t devices, int64_t num_nodes,
                           FSDPOptions options)
    : ParallelStrategy(std::move(precision), std::move(accelerator), devices, num_nodes,
                       std::chrono::seconds(options.timeout), options.process_group_backend),
      options_(validated(std::move(options))),
      mesh_(options_, devices, num_nodes),
      dtypes_(detail::resolve_dtypes(options_, precision_, accelerator_)) {}

FSDPStrategy::~FSDPStrategy() = default;

void FSDPStrategy::setup_environment() {
  ParallelStrategy::setup_environment();
  mesh_.connect(device_mesh());
}

MeshLayout FSDPStrategy::mesh_layout() const { return mesh_.layout(); }

detail::FlatParamSpec FSDPStrategy::flat_param_spec() const {
  detail::FlatParamSpec s;
  s.shard_rank = mesh_.shard_rank();
  s.shard_size = mesh_.shard_size();
  s.param_dtype = dtypes_.param;
  // Under a "-true" precision the model's own dtype is 16-bit: the shards keep it (2 bytes per
  // parameter, as Lightning's FSDP with bf16-true); otherwise fp32 master weights.
  s.shard_dtype = precision_.param_dtype();
  s.device = root_device();
  // cpu_offload moves shards off the device only with a GPU (on the CPU everything already lives in
  // host memory); there it still makes the shards exact-size host buffers (FlatParam).
  s.offload = options_.cpu_offload;
  return s;
}

detail::RankAgreement FSDPStrategy::rank_agreement() {
  return {world_size() == 1 ? nullptr : &process_group(), options_.sync_module_states};
}

// ---------------------------------------------------------------------------------------------
// set-up: deferred_wrap.h (units made while the model is built), rank_agreement.h, unit_builder.h

void FSDPStrategy::wrap(torch::nn::Module& unit) {
  VOLT_CHECK(!schedule_, ConfigError,
             "FSDP: wrap() is for configure_model(), while the model is being built; this model is already sharded");
  if (!deferred_.selects(unit, options_.auto_wrap_policy)) return;
  const detail::RankAgreement agreement = rank_agreement();
  deferred_.shard(unit, agreement, flat_param_spec());
}

void FSDPStrategy::setup_module(LightningModule& module) {
  if (schedule_ && sharded_ == &module) {
    // Kept sharded since the last fit/validate/test of this Trainer: the shards are the state.
    VOLT_CHECK(deferred_.empty(), ConfigError,
               "FSDP: configure_model() wrapped new layers into a model that is already sharded; make it "
               "idempotent (build the layers only when they do not exist yet), as Lightning requires");
    for (auto& u : schedule_->units()) u.flat->bind_params();
    Strategy::setup_module(module);
    return;
  }
  if (schedule_) unshard_module(*sharded_);  // another module: give the old one back whole first
  Strategy::setup_module(module);
  agree_before_sharding(module);
  if (dtypes_.buffer) {
    // After the broadcast (Gloo cannot send bf16): buffers keep their identity, change dtype.
    torch::NoGradGuard ng;
    for (auto& kv : module.named_buffers()) kv.value().set_data(kv.value().to(*dtypes_.buffer));
  }
  schedule_ = std::make_unique<detail::FSDPSchedule>(schedule_options(), mesh_);
  schedule_->install(detail::build_units(module, options_.auto_wrap_policy, deferred_, flat_param_spec()));
  sharded_ = &module;
  const bool offload = schedule_->units()[0].flat->offloaded();
  spdlog::info("FSDP {}: {} unit(s) + root, shard group {} x replicate {}, param dtype {}{}",
               options_.sharding_strategy.text(), schedule_->units().size() - 1, mesh_.shard_size(),
               mesh_.replicate_size(), c10::toString(dtypes_.param),
               offload ? ", shards and optimizer state offloaded to pinned host memory" : "");
}

void FSDPStrategy::agree_before_sharding(LightningModule& module) {
  // Units wrap() sharded agreed then; everything else agrees now, before it is sharded.
  const std::set<c10::TensorImpl*> done = deferred_.params();
  NamedTensors states;
  for (const auto& kv : module.named_parameters())
    if (!done.count(kv.value().unsafeGetTensorImpl())) states.emplace_back(kv.key(), kv.value());
  for (const auto& kv : module.named_buffers()) states.emplace_back(kv.key(), kv.value());
  rank_agreement().agree(states);
}

detail::FSDPScheduleOptions FSDPStrategy::schedule_options() const {
  detail::FSDPScheduleOptions so;
  const ShardingStrategy s = options_.sharding_strategy.value();
  so.free_after_forward = s == ShardingStrategy::FullShard || s == ShardingStrategy::HybridShard;
  so.backward_prefetch = options_.backward_prefetch.value();
  so.forward_prefetch = options_.forward_prefetch;
  so.limit_all_gathers = options_.limit_all_gathers;
  so.reduce_dtype = dtypes_.reduce;
  so.world_size = world_size();
  so.device = root_device();
  so.profiler = profiler_;
  return so;
}

// ---------------------------------------------------------------------------------------------
// the optimizer: optimizer_shards.h (this rank's slices), optimizer_in_backward.h

void FSDPStrategy::setup_optimizer(LightningModule&, OptimizerConfig& config) {
  auto& opt = *config.optimizer;
  detail::step_shards_only(opt, schedule_->units());
  if (!options_.optimizer_in_backward) return;
  // LBFGS's step re-evaluates the whole model (a closure): it cannot step unit by unit.
  VOLT_CHECK(typeid(opt) != typeid(torch::optim::LBFGS), ConfigError,
             "config key 'trainer.strategy.optimizer_in_backward': LBFGS steps the whole model at once (with a "
             "closure) and cannot step one unit at a time; turn optimizer_in_backward off");
  stepper_ = std::make_unique<detail::BackwardStepper>(
      config.optimizer, detail::BackwardStepperOptions{options_.cpu_offload, clip_value_});
  schedule_->set_stepper(stepper_.get());
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
// steps: fsdp_schedule.h gathers, frees and reduces

std::string FSDPStrategy::cuda_graph_unsupported_reason() const {
  return "FSDP gathers each unit's parameters into memory it frees after use and allocates again at the next "
         "gather, while a captured graph reads the memory it was captured with. Use strategy: ddp (or "
         "single_device) for CUDA graphs, or turn trainer.cuda_graph off";
}

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
// state: fsdp_state_layout.h

std::map<std::string, torch::Tensor> FSDPStrategy::model_state_dict(LightningModule& module) {
  if (!schedule_) return Strategy::model_state_dict(module);  // not sharded (after teardown)
  return detail::full_state_dict(schedule_->units(), mesh_, module);
}

StateLayout FSDPStrategy::state_layout(LightningModule& module, const OptimizerList& optimizers) {
  if (!schedule_) return Strategy::state_layout(module, optimizers);
  return detail::fsdp_state_layout(schedule_->units(), mesh_, module, optimizers, global_rank());
}

// ---------------------------------------------------------------------------------------------
// teardown

void FSDPStrategy::teardown(LightningModule& module) {
  deferred_.clear();  // units of a configure_model() that failed before set-up
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
  schedule_->set_stepper(nullptr);
  stepper_.reset();
  std::vector<detail::FSDPUnit> units = schedule_->uninstall();
  detail::dissolve_units(units, mesh_.shard_group(), root_device(), precision_.param_dtype());
  schedule_.reset();
  sharded_ = nullptr;
  Strategy::teardown(module);
}

// ---------------------------------------------------------------------------------------------
// introspection

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
