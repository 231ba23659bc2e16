#include "volt/strategies/strategy.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "volt/checkpoint/tensor_archive.h"
#include "volt/core/errors.h"
#include "volt/module/lightning_module.h"
#include "volt/optim/fused_adam.h"
#include "volt/strategies/activation_checkpointing.h"
#include "volt/strategies/cuda_graphs/cuda_graphs.h"

namespace volt {

Strategy::Strategy(Precision precision, std::string accelerator)
    : precision_(std::move(precision)), accelerator_(std::move(accelerator)) {
  // Skipping a step must be decided by all ranks together: each may hold other gradient pieces.
  precision_.enable_loss_scaling([this](bool inf) { return reduce_boolean_decision(inf, /*all=*/false); });
}

torch::Device Strategy::root_device() const {
  return accelerator_ == "cuda" ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(device_index_))
                                : torch::Device(torch::kCPU);
}

void Strategy::setup_module(LightningModule& module) {
  for (const auto& kv : module.named_parameters())
    VOLT_CHECK(kv.value().sizes() != c10::IntArrayRef{0}, ConfigError, "parameter '", kv.key(),
               "' is empty: this model was left sharded by an FSDP Trainer after fit and that Trainer is gone. Call "
               "trainer.strategy().unshard_module(model) while the Trainer exists to get it back whole (or save a "
               "checkpoint and load it)");
  module.to(root_device());
  precision_.convert_module(module);
  const size_t n = apply_activation_checkpointing(module, ac_policy_, ac_key_);
  if (n > 0) spdlog::info("Activation checkpointing on {} module(s)", n);
  if (cuda_graphs_on_) setup_cuda_graphs(module);
}

std::string Strategy::cuda_graph_unsupported_reason() const {
  if (accelerator_ != "cuda")
    return detail::str_cat("CUDA graphs record GPU kernels, and this run's accelerator is ", accelerator_,
                           "; set trainer.accelerator: cuda, or turn trainer.cuda_graph off");
  if (!ac_policy_.empty())
    return "activation checkpointing recomputes forwards inside backward, which a captured backward cannot "
           "contain; remove trainer.strategy.activation_checkpointing_policy";
  return {};
}

void Strategy::setup_cuda_graphs(LightningModule& module) {
  // Graphs left by a fit that failed go first: their recorder puts its thread's stream back as it
  // was before the new one takes a stream ([Note: the fit's stream with CUDA graphs]).
  cuda_graphs_.reset();
  cuda_graphs_ = std::make_shared<detail::CudaGraphs>(detail::make_graph_recorder(root_device()));
  const size_t n = cuda_graphs_->apply(module);
  if (n == 0) cuda_graphs_.reset();  // nothing to capture: the stream goes back before the error
  VOLT_CHECK(n > 0, ConfigError,
             "config key 'trainer.cuda_graph': the model has no module to capture. volt graphs the outermost "
             "HookedModules (wrap the layers with volt::hooked(...) or derive them from volt::HookedModule, as the "
             "demo and LlamaLM do)");
  spdlog::info("CUDA graphs on {} module(s): each is captured at its first training call", n);
}

void Strategy::teardown(LightningModule& module) {
  if (cuda_graphs_) {
    const auto stats = cuda_graphs_->stats();
    if (stats.captured > 0 || stats.eager > 0) spdlog::info("{}", cuda_graphs_->summary());
    cuda_graphs_->remove(module);
    cuda_graphs_.reset();
  }
  remove_activation_checkpointing(module);
}

void Strategy::set_activation_checkpointing(ModulePolicy policy, std::string config_key) {
  ac_policy_ = std::move(policy);
  ac_key_ = std::move(config_key);
}

Batch Strategy::batch_to_device(LightningModule& module, const Batch& batch, int64_t dataloader_idx) const {
  Batch b = module.on_before_batch_transfer(batch, dataloader_idx);
  b = module.transfer_batch_to_device(std::move(b), root_device(), dataloader_idx);
  b = module.on_after_batch_transfer(std::move(b), dataloader_idx);
  // Under a 16-bit "-true" precision floating inputs take the model's dtype, as Lightning's
  // HalfPrecision.convert_input does (token ids and other integers are left alone).
  const at::ScalarType p = precision_.param_dtype();
  if (p != at::kBFloat16 && p != at::kHalf) return b;
  return b.map([&](const torch::Tensor& t) { return t.is_floating_point() ? t.to(p) : t; });
}

namespace {
/// all_gather with a backward: each rank's input gets the sum over ranks of its slice's gradient.
struct AllGatherFunction : torch::autograd::Function<AllGatherFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& t, int64_t strategy) {
    auto* s = reinterpret_cast<Strategy*>(strategy);
    ctx->saved_data["strategy"] = strategy;
    return torch::stack(s->all_gather_list(t.detach()));
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* s = reinterpret_cast<Strategy*>(ctx->saved_data["strategy"].toInt());
    torch::Tensor summed = s->all_reduce(grads[0].contiguous(), ReduceOp::Sum);
    return {summed[s->global_rank()], torch::Tensor()};
  }
};
}  // namespace

torch::Tensor Strategy::all_gather(const torch::Tensor& t, bool sync_grads) {
  if (sync_grads && t.requires_grad()) return AllGatherFunction::apply(t.contiguous(), reinterpret_cast<int64_t>(this));
  torch::NoGradGuard ng;
  return torch::stack(all_gather_list(t.detach().contiguous()));
}

torch::Tensor Strategy::training_step(LightningModule& module, const Batch& batch, int64_t batch_idx) {
  auto scope = profile(profiler_, "training_step");
  auto guard = precision_.forward_guard(accelerator_ == "cuda");
  auto graphs = cuda_graphs_ ? cuda_graphs_->step() : detail::CudaGraphs::Step();
  return module.training_step(batch, batch_idx);
}

void Strategy::validation_step(LightningModule& module, const Batch& batch, int64_t batch_idx, int64_t dataloader_idx) {
  auto scope = profile(profiler_, "validation_step");
  auto guard = precision_.forward_guard(accelerator_ == "cuda");
  module.validation_step(batch, batch_idx, dataloader_idx);
}

void Strategy::test_step(LightningModule& module, const Batch& batch, int64_t batch_idx, int64_t dataloader_idx) {
  auto scope = profile(profiler_, "test_step");
  auto guard = precision_.forward_guard(accelerator_ == "cuda");
  module.test_step(batch, batch_idx, dataloader_idx);
}

Batch Strategy::predict_step(LightningModule& module, const Batch& batch, int64_t batch_idx, int64_t dataloader_idx) {
  auto scope = profile(profiler_, "predict_step");
  auto guard = precision_.forward_guard(accelerator_ == "cuda");
  return module.predict_step(batch, batch_idx, dataloader_idx);
}

void Strategy::backward(LightningModule& module, const torch::Tensor& loss, bool sync_gradients) {
  auto scope = profile(profiler_, "backward");
  run_backward(module, precision_.scale_loss(loss), sync_gradients);
}

void Strategy::run_backward(LightningModule&, const torch::Tensor& loss, bool) { loss.backward(); }

namespace {
// [Note: gradient norms without fp64 copies]
// Clipping by norm needs the sum of every gradient's squares, accurately: an fp32 reduction over a
// tensor of millions of elements drifts (LibTorch 1.13's CPU kernel accumulates in order: 0.3%
// off the fp64 value for a 34 M-element gradient), and asking ATen for fp64 makes it copy the
// whole fp32 gradient to fp64 first (it reduces in the output dtype), 8 bytes written and read
// again per parameter. So each gradient is cut into rows of kNormRow elements, each row's norm is
// taken in fp32 (fp64 gradients: fp64; bf16 ones on a GPU reduce straight into fp32), and only
// the row norms, 1/kNormRow of the gradient, are squared and summed in fp64. bench_optimizer:
// 11-16x faster than the fp64 reductions on the CPU, within 2e-9 of their value. A row whose fp32
// sum of squares overflows (a norm above about 1.8e19) makes the total inf: the total is then taken
// again in fp64, so that only a gradient that holds inf or nan gives a non-finite norm.
constexpr int64_t kNormRow = 1024;

/// Appends the norms of `grad`'s rows of kNormRow elements (the last one shorter) to `out`, in fp64
/// for an fp64 gradient and in fp32 otherwise.
void append_row_norms(const torch::Tensor& grad, std::vector<torch::Tensor>& out) {
  if (grad.is_sparse()) return append_row_norms(grad.coalesce().values(), out);  // its stored values
  const auto dtype = grad.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
  const torch::Tensor flat = grad.reshape(-1);
  const int64_t rows = flat.numel() / kNormRow, whole = rows * kNormRow;
  if (rows > 0) out.push_back(torch::norm(flat.narrow(0, 0, whole).view({rows, kNormRow}), 2, {1}, false, dtype));
  if (flat.numel() > whole)
    out.push_back(torch::norm(flat.narrow(0, whole, flat.numel() - whole), 2, dtype).reshape({1}));
}
}  // namespace

double Strategy::gradient_norm(torch::optim::Optimizer& optimizer) {
  // The norms stay on the device; one host sync for the total ([Note: gradient norms without fp64
  // copies]).
  std::vector<torch::Tensor> f32, f64;  // row norms, by dtype
  for (auto& g : optimizer.param_groups())
    for (auto& p : g.params())
      if (p.grad().defined()) append_row_norms(p.grad().detach(), p.grad().scalar_type() == torch::kDouble ? f64 : f32);
  double sq = 0.0;
  if (!f32.empty()) sq += torch::cat(f32).to(torch::kDouble).square().sum().item<double>();
  if (!f64.empty()) sq += torch::cat(f64).square().sum().item<double>();
  if (!std::isfinite(sq)) {  // an fp32 row overflowed, or a gradient holds inf/nan: fp64 decides
    std::vector<torch::Tensor> norms;
    for (auto& g : optimizer.param_groups())
      for (auto& p : g.params())
        if (p.grad().defined()) norms.push_back(torch::norm(p.grad().detach(), 2, torch::kDouble));
    sq = torch::stack(norms).square().sum().item<double>();
  }
  return std::sqrt(reduce_grad_norm_sq(sq));
}

double Strategy::clip_gradients(torch::optim::Optimizer& optimizer, double value, GradientClipAlgorithm algorithm) {
  torch::NoGradGuard ng;
  if (algorithm == GradientClipAlgorithm::Value) {
    for (auto& g : optimizer.param_groups())
      for (auto& p : g.params())
        if (p.grad().defined()) p.mutable_grad().clamp_(-value, value);
    return 0.0;
  }
  const double total = gradient_norm(optimizer);
  const double coef = value / (total + 1e-6);
  if (coef < 1.0)
    for (auto& g : optimizer.param_groups())
      for (auto& p : g.params())
        if (p.grad().defined()) p.mutable_grad().mul_(coef);
  return total;
}

bool Strategy::optimizer_step(torch::optim::Optimizer& optimizer, const std::function<void()>& before_step) {
  auto scope = profile(profiler_, "optimizer_step");
  const bool stepped = precision_.optimizer_step(optimizer, before_step, [&] { run_optimizer_step(optimizer); });
  after_optimizer_step();
  return stepped;
}

void Strategy::run_optimizer_step(torch::optim::Optimizer& optimizer) {
  if (!fused_adam_step(optimizer)) optimizer.step();
}

void Strategy::zero_grad(torch::optim::Optimizer& optimizer) {
  auto scope = profile(profiler_, "zero_grad");
  for (auto& g : optimizer.param_groups())
    for (auto& p : g.params())
      if (p.grad().defined()) p.mutable_grad() = torch::Tensor();  // set_to_none, as PyTorch 2 does
}

bool Strategy::reduce_boolean_decision(bool decision, bool all) {
  auto t = torch::tensor(decision ? 1.0 : 0.0, torch::kFloat);
  auto r = all_reduce(t, all ? ReduceOp::Min : ReduceOp::Max);
  return r.item<float>() > 0.5f;
}

std::map<std::string, torch::Tensor> Strategy::model_state_dict(LightningModule& module) {
  std::map<std::string, torch::Tensor> out;
  for (auto& kv : module.named_parameters()) out[kv.key()] = kv.value().detach().cpu();
  for (auto& kv : module.named_buffers()) out[kv.key()] = kv.value().detach().cpu();
  return out;
}

namespace {
/// The strategy's own collectives, as checkpoint/ asks for them.
class StrategyComm : public StateComm {
 public:
  explicit StrategyComm(Strategy& s) : s_(s) {}
  int64_t rank() const override { return s_.global_rank(); }
  int64_t world_size() const override { return s_.world_size(); }
  torch::Tensor all_reduce(const torch::Tensor& t, ReduceOp op) override { return s_.all_reduce(t, op); }
  torch::Tensor broadcast(const torch::Tensor& t, int64_t src) override { return s_.broadcast(t, src); }

 private:
  Strategy& s_;
};
}  // namespace

StateComm& Strategy::state_comm() {
  if (!state_comm_) state_comm_ = std::make_unique<StrategyComm>(*this);
  return *state_comm_;
}

StateLayout Strategy::state_layout(LightningModule& module, const OptimizerList& optimizers) {
  StateLayout l;
  // A tensor registered under several names (tied weights) is saved once, under its first name, as
  // FSDP's flat entries name it: checkpoints of every strategy then hold the same names.
  std::set<const c10::TensorImpl*> seen;
  for (auto& kv : module.named_parameters())
    if (seen.insert(kv.value().unsafeGetTensorImpl()).second) l.params.emplace_back(kv.key(), kv.value());
  for (auto& kv : module.named_buffers()) l.buffers.emplace_back(kv.key(), kv.value());
  l.optimizers = optimizers;
  return l;
}

void Strategy::save_checkpoint(LightningModule& module, const OptimizerList& optimizers, const CheckpointHeader& header,
                               const std::string& path) {
  const CheckpointFormat format = checkpoint_format() == "sharded" ? CheckpointFormat::Sharded : CheckpointFormat::Full;
  save_state(state_layout(module, optimizers), header, path, format, state_comm());
}

void Strategy::load_checkpoint(LightningModule& module, const OptimizerList& optimizers, const CheckpointReader& ckpt) {
  load_state(state_layout(module, optimizers), ckpt);
}

void detail::agree_or_throw(Strategy& s, const std::string& local_error, const std::string& what) {
  detail::agree_or_throw(s.state_comm(), local_error, what);
}

}  // namespace volt
