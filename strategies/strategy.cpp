#include "volt/strategies/strategy.h"

#include <torch/torch.h>

#include <cmath>

#include <spdlog/spdlog.h>

#include "volt/core/errors.h"
#include "volt/strategies/activation_checkpointing.h"
#include "volt/trainer/lightning_module.h"

namespace volt {

Strategy::Strategy(Precision precision, std::string accelerator)
    : precision_(std::move(precision)), accelerator_(std::move(accelerator)) {}

torch::Device Strategy::root_device() const {
  return accelerator_ == "cuda" ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(device_index_))
                                : torch::Device(torch::kCPU);
}

void Strategy::setup_module(LightningModule& module) {
  module.to(root_device());
  precision_.convert_module(module);
  const size_t n = apply_activation_checkpointing(module, ac_policy_, ac_key_);
  if (n > 0) spdlog::info("Activation checkpointing on {} module(s)", n);
}

void Strategy::teardown(LightningModule& module) { remove_activation_checkpointing(module); }

void Strategy::set_activation_checkpointing(ModulePolicy policy, std::string config_key) {
  ac_policy_ = std::move(policy);
  ac_key_ = std::move(config_key);
}

Batch Strategy::batch_to_device(const Batch& batch) const {
  const torch::Device dev = root_device();
  if (dev.is_cpu()) return batch;
  Batch out;
  out.reserve(batch.size());
  // Pinned host memory lets the copy run asynchronously with respect to the host.
  for (const auto& t : batch) out.push_back(t.defined() ? t.to(dev, /*non_blocking=*/t.is_pinned()) : t);
  return out;
}

torch::Tensor Strategy::training_step(LightningModule& module, const Batch& batch, int64_t batch_idx) {
  auto guard = precision_.forward_guard(accelerator_ == "cuda");
  return module.training_step(batch_to_device(batch), batch_idx);
}

void Strategy::validation_step(LightningModule& module, const Batch& batch, int64_t batch_idx) {
  auto guard = precision_.forward_guard(accelerator_ == "cuda");
  module.validation_step(batch_to_device(batch), batch_idx);
}

void Strategy::test_step(LightningModule& module, const Batch& batch, int64_t batch_idx) {
  auto guard = precision_.forward_guard(accelerator_ == "cuda");
  module.test_step(batch_to_device(batch), batch_idx);
}

void Strategy::backward(LightningModule&, const torch::Tensor& loss, bool) { loss.backward(); }

double Strategy::gradient_norm(torch::optim::Optimizer& optimizer) {
  // Per-tensor norms in fp64 stay on the device; one host sync for the total.
  std::vector<torch::Tensor> norms;
  for (auto& g : optimizer.param_groups())
    for (auto& p : g.params())
      if (p.grad().defined()) norms.push_back(torch::norm(p.grad().detach(), 2, torch::kDouble));
  const double sq = norms.empty() ? 0.0 : torch::stack(norms).square().sum().item<double>();
  return std::sqrt(reduce_grad_norm_sq(sq));
}

double Strategy::clip_gradients(torch::optim::Optimizer& optimizer, double value, const std::string& algorithm) {
  torch::NoGradGuard ng;
  if (algorithm == "value") {
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

void Strategy::optimizer_step(torch::optim::Optimizer& optimizer) { optimizer.step(); }

void Strategy::zero_grad(torch::optim::Optimizer& optimizer) {
  for (auto& g : optimizer.param_groups())
    for (auto& p : g.params())
      if (p.grad().defined()) p.mutable_grad() = torch::Tensor();  // set_to_none, as PyTorch 2 does
}

bool Strategy::reduce_boolean_decision(bool decision, bool all) {
  auto t = torch::tensor(decision ? 1.0 : 0.0, torch::kFloat);
  auto r = all_reduce(t, all ? ReduceOp::Min : ReduceOp::Max);
  return r.item<float>() > 0.5f;
}

NamedTensors Strategy::optimizer_params(LightningModule& module) {
  NamedTensors out;
  for (auto& kv : module.named_parameters()) out.emplace_back(kv.key(), kv.value());
  return out;
}

std::map<std::string, torch::Tensor> Strategy::model_state_dict(LightningModule& module) {
  std::map<std::string, torch::Tensor> out;
  for (auto& kv : module.named_parameters()) out[kv.key()] = kv.value().detach().cpu();
  for (auto& kv : module.named_buffers()) out[kv.key()] = kv.value().detach().cpu();
  return out;
}

void Strategy::load_model_state_dict(LightningModule& module, const std::map<std::string, torch::Tensor>& state,
                                     const std::string& source) {
  torch::NoGradGuard ng;
  auto load = [&](const std::string& name, torch::Tensor& dst) {
    auto it = state.find(name);
    VOLT_CHECK(it != state.end(), CheckpointError, source, ": no tensor '", name,
               "' in the checkpoint (a checkpoint of another model?)");
    VOLT_CHECK(it->second.sizes() == dst.sizes(), CheckpointError, source, ": tensor '", name, "' has shape ",
               it->second.sizes(), " but the model has ", dst.sizes(), " (a checkpoint of another model?)");
    dst.copy_(it->second);
  };
  size_t expected = 0;
  for (auto& kv : module.named_parameters()) {
    load(kv.key(), kv.value());
    ++expected;
  }
  for (auto& kv : module.named_buffers()) {
    load(kv.key(), kv.value());
    ++expected;
  }
  VOLT_CHECK(state.size() == expected, CheckpointError, source, ": the checkpoint has ", state.size(),
             " tensors, the model ", expected, " (a checkpoint of another model?)");
}

std::map<std::string, torch::Tensor> Strategy::optimizer_state_dict(LightningModule& module,
                                                                    torch::optim::Optimizer& optimizer) {
  return optimizer_state_to_tensors(optimizer, optimizer_params(module));
}

void Strategy::load_optimizer_state_dict(LightningModule& module, torch::optim::Optimizer& optimizer,
                                         const std::map<std::string, torch::Tensor>& state,
                                         const std::string& source) {
  optimizer_state_from_tensors(optimizer, optimizer_params(module), state, source);
}

void Strategy::save_checkpoint(const Checkpoint& checkpoint, const std::string& path) {
  if (is_global_zero()) save_checkpoint_file(checkpoint, path);
  barrier("save_checkpoint");
}

Checkpoint Strategy::load_checkpoint(const std::string& path) { return load_checkpoint_file(path); }

}  // namespace volt
