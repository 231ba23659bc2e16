#include "volt/strategies/strategy.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include <spdlog/spdlog.h>

#include "volt/checkpoint/tensor_archive.h"
#include "volt/core/errors.h"
#include "volt/optim/fused_adam.h"
#include "volt/strategies/activation_checkpointing.h"
#include "volt/trainer/lightning_module.h"

namespace volt {

Strategy::Strategy(Precision precision, std::string accelerator)
    : precision_(std::move(precision)), accelerator_(std::move(accelerator)) {
  // Skipping a step must be decided by all ranks together: each may hold other gradient pieces.
  if (precision_.name() == "16-mixed")
    grad_scaler_ = std::make_unique<GradScaler>(GradScalerOptions{},
                                                [this](bool inf) { return reduce_boolean_decision(inf, /*all=*/false); });
}

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

void Strategy::optimizer_step(torch::optim::Optimizer& optimizer) {
  if (!fused_adam_step(optimizer)) optimizer.step();
}

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

namespace {
/// Checks that `ckpt` holds `name` with `shape`; the message names the file and the tensor.
void check_model_tensor(const CheckpointReader& ckpt, const std::string& name, c10::IntArrayRef shape) {
  VOLT_CHECK(ckpt.has(kModelSection, name), CheckpointError, ckpt.path(), ": no tensor '", name,
             "' in the checkpoint (a checkpoint of another model?)");
  const auto& t = ckpt.tensor(kModelSection, name);
  VOLT_CHECK(c10::IntArrayRef(t.shape) == shape, CheckpointError, ckpt.path(), ": tensor '", name, "' has shape ",
             c10::IntArrayRef(t.shape), " but the model has ", shape, " (a checkpoint of another model?)");
}
}  // namespace

void detail::check_checkpoint_model(const CheckpointReader& ckpt, const std::vector<std::pair<std::string, std::vector<int64_t>>>& expected) {
  for (const auto& [name, shape] : expected) check_model_tensor(ckpt, name, shape);
  const size_t have = ckpt.names(kModelSection).size();
  VOLT_CHECK(have == expected.size(), CheckpointError, ckpt.path(), ": the checkpoint has ", have,
             " model tensors, the model ", expected.size(), " (a checkpoint of another model?)");
}

std::map<std::string, torch::Tensor> Strategy::gather_rank_tensors(const std::map<std::string, torch::Tensor>& local) {
  std::map<std::string, torch::Tensor> out;
  const int64_t w = world_size(), r = global_rank();
  for (const auto& [k, t] : local) {
    if (w == 1) {
      out["rank0." + k] = t;
      continue;
    }
    // Exact for the byte states this carries; one all-reduce, no variable-size collective needed.
    torch::Tensor flat = t.detach().to(torch::kCPU).reshape({-1}).to(torch::kDouble);
    torch::Tensor rows = torch::zeros({w, flat.numel()}, torch::kDouble);
    rows[r].copy_(flat);
    rows = all_reduce(rows, ReduceOp::Sum);
    for (int64_t q = 0; q < w; ++q) out["rank" + std::to_string(q) + "." + k] = rows[q].to(t.scalar_type()).view(t.sizes());
  }
  return out;
}

void Strategy::save_checkpoint(LightningModule& module, torch::optim::Optimizer* optimizer, const Checkpoint& header,
                               const std::string& path) {
  auto rng = gather_rank_tensors(header.rng_states);
  std::string error;
  if (is_global_zero()) {
    try {
      ArchiveWriter w(path);
      for (auto& kv : module.named_parameters()) w.add(kModelSection, kv.key(), kv.value());
      for (auto& kv : module.named_buffers()) w.add(kModelSection, kv.key(), kv.value());
      if (optimizer)
        for_each_optimizer_state(*optimizer, optimizer_params(module),
                                 [&](const std::string& n, const std::string& f, const torch::Tensor& t) {
                                   w.add(kOptimizerSection, n + "." + f, t);
                                 });
      for (const auto& [k, v] : rng) w.add(kRngSection, k, v);
      w.commit(detail::checkpoint_fields(header), detail::checkpoint_index_meta(header));
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  detail::agree_or_throw(*this, error, "saving checkpoint '" + path + "'");
}

void Strategy::load_checkpoint(LightningModule& module, torch::optim::Optimizer* optimizer,
                               const CheckpointReader& ckpt) {
  torch::NoGradGuard ng;
  std::vector<std::pair<std::string, std::vector<int64_t>>> expected;
  for (auto& kv : module.named_parameters()) expected.emplace_back(kv.key(), kv.value().sizes().vec());
  for (auto& kv : module.named_buffers()) expected.emplace_back(kv.key(), kv.value().sizes().vec());
  detail::check_checkpoint_model(ckpt, expected);
  for (auto& kv : module.named_parameters()) kv.value().copy_(ckpt.read(kModelSection, kv.key()));
  for (auto& kv : module.named_buffers()) kv.value().copy_(ckpt.read(kModelSection, kv.key()));
  if (!optimizer || ckpt.names(kOptimizerSection).empty()) return;
  // Parameter by parameter: one parameter's state in flight besides the optimizer's own.
  const std::vector<std::string> names = ckpt.names(kOptimizerSection);  // sorted
  for (const auto& [name, p] : optimizer_params(module)) {
    std::map<std::string, torch::Tensor> state;
    for (auto it = std::lower_bound(names.begin(), names.end(), name + "."); it != names.end() && it->rfind(name + ".", 0) == 0; ++it)
      if (it->find('.', name.size() + 1) == std::string::npos)  // "<name>.<field>", not a longer name's
        state[*it] = ckpt.read(kOptimizerSection, *it);
    optimizer_state_from_tensors(*optimizer, {{name, p}}, state, ckpt.path());
  }
}

void detail::agree_or_throw(Strategy& s, const std::string& local_error, const std::string& what) {
  const int64_t world = s.world_size();
  // The lowest failing rank (world when none failed), then its message, so every rank's error
  // says what went wrong and where, whichever rank's log the user reads.
  const int64_t failing = static_cast<int64_t>(
      s.all_reduce(torch::tensor(static_cast<double>(local_error.empty() ? world : s.global_rank()), torch::kDouble),
                   ReduceOp::Min)
          .item<double>());
  if (failing >= world) return;
  const std::string mine = failing == s.global_rank() ? local_error : std::string();
  const auto n = static_cast<int64_t>(
      s.broadcast(torch::tensor(static_cast<double>(mine.size()), torch::kDouble), failing).item<double>());
  torch::Tensor bytes = torch::zeros({std::max<int64_t>(n, 1)}, torch::kUInt8);
  if (failing == s.global_rank()) std::memcpy(bytes.data_ptr<uint8_t>(), mine.data(), static_cast<size_t>(n));
  bytes = s.broadcast(bytes, failing);
  const std::string theirs(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()), static_cast<size_t>(n));
  if (!local_error.empty()) throw CheckpointError(local_error);
  throw CheckpointError(str_cat(what, " failed on rank ", failing, ": ", theirs));
}

}  // namespace volt
