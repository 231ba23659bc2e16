#include "volt/strategies/precision.h"

#include <torch/torch.h>

#include "volt/core/compat.h"
#include "volt/core/errors.h"

namespace volt {

Precision::Precision(std::string name, const std::string& accelerator) : name_(std::move(name)) {
  // Lightning accepts short aliases too.
  if (name_ == "32" || name_ == "32-true") {
    name_ = "32-true";
  } else if (name_ == "bf16" || name_ == "bf16-mixed") {
    name_ = "bf16-mixed";
    mixed_ = true;
    compute_dtype_ = at::kBFloat16;
  } else if (name_ == "bf16-true") {
    param_dtype_ = compute_dtype_ = at::kBFloat16;
  } else if (name_ == "16" || name_ == "16-mixed") {
    VOLT_CHECK(accelerator == "cuda", ConfigError,
               "trainer.precision: '16-mixed' needs accelerator 'cuda' (fp16 autocast with a gradient scaler);"
               " on the CPU use 'bf16-mixed'");
    name_ = "16-mixed";  // the Strategy adds a GradScaler (grad_scaler.h)
    mixed_ = true;
    compute_dtype_ = at::kHalf;
  } else {
    throw ConfigError("trainer.precision: unknown value '" + name_ +
                      "'; valid: '32-true', 'bf16-mixed', 'bf16-true', '16-mixed' (CUDA)");
  }
}

void Precision::convert_module(torch::nn::Module& module) const {
  if (param_dtype_ != at::kFloat) module.to(param_dtype_);
}

Precision::ForwardGuard::ForwardGuard(const Precision& p, bool cuda) : active_(p.mixed()), cuda_(cuda), prev_(false) {
  if (!active_) return;
  if (cuda_) {
    compat::set_cuda_autocast(true, p.compute_dtype());
  } else {
    prev_ = compat::cpu_autocast_enabled();
    compat::set_cpu_autocast(true, p.compute_dtype());
  }
}

Precision::ForwardGuard::~ForwardGuard() {
  if (!active_) return;
  if (cuda_) {
    compat::set_cuda_autocast(false, at::kHalf);
  } else {
    compat::set_cpu_autocast(prev_, at::kBFloat16);
  }
  compat::clear_autocast_cache();
}

at::ScalarType Precision::dtype_from_name(const std::string& name, const std::string& key) {
  if (name == "float32" || name == "fp32" || name == "float") return at::kFloat;
  if (name == "bfloat16" || name == "bf16") return at::kBFloat16;
  if (name == "float16" || name == "fp16" || name == "half") return at::kHalf;
  if (name == "float64" || name == "double") return at::kDouble;
  throw ConfigError("config key '" + key + "': unknown dtype '" + name +
                    "'; valid: float32, bfloat16, float16, float64");
}

void Precision::enable_loss_scaling(std::function<bool(bool)> any_rank) {
  if (name_ == "16-mixed") scaler_ = std::make_shared<GradScaler>(GradScalerOptions{}, std::move(any_rank));
}

torch::Tensor Precision::scale_loss(const torch::Tensor& loss) const {
  return scaler_ ? scaler_->scale_loss(loss) : loss;
}

bool Precision::optimizer_step(torch::optim::Optimizer& optimizer, const std::function<void()>& before_step,
                               const std::function<void()>& step) {
  if (scaler_) scaler_->unscale(optimizer);
  before_step();
  if (!scaler_) {
    step();
    return true;
  }
  return scaler_->step(optimizer, step);
}

YAML::Node Precision::state_dict() const { return scaler_ ? scaler_->state_dict() : YAML::Node(YAML::NodeType::Map); }

void Precision::load_state_dict(const YAML::Node& state) {
  if (scaler_ && state && state.IsMap() && state.size() > 0) scaler_->load_state_dict(state);
}

}  // namespace volt
