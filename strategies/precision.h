#pragma once
/// Precision plugin: Lightning's precision names mapped to dtypes and autocast. Owned by the
/// Strategy. It owns the loss scaler of "16-mixed" (scale, unscale, step-or-skip, its state), so the
/// Trainer asks for one optimizer step and never sees the scaler. "32-true" fp32; "bf16-mixed" fp32 weights, bf16
/// autocast in forward; "bf16-true" the whole model in bf16; "16-mixed" fp16 autocast with a gradient scaler (CUDA
/// only).
#include <torch/types.h>
#include <yaml-cpp/yaml.h>

#include <functional>
#include <memory>
#include <string>

#include "volt/core/stateful.h"
#include "volt/strategies/grad_scaler.h"

namespace torch::nn {
class Module;
}

namespace volt {

class Precision : public Stateful {
 public:
  /// Throws ConfigError for an unknown name, or one the accelerator cannot run.
  Precision(std::string name, const std::string& accelerator);
  const std::string& name() const { return name_; }
  bool mixed() const { return mixed_; }
  /// The dtype parameters are stored in (fp32, or bf16 for "bf16-true").
  at::ScalarType param_dtype() const { return param_dtype_; }
  /// The dtype forward math runs in (bf16 for both bf16 modes).
  at::ScalarType compute_dtype() const { return compute_dtype_; }
  /// Casts the module for "-true" precisions; no-op otherwise.
  void convert_module(torch::nn::Module& module) const;

  /// RAII: autocast on for the lifetime of the guard when the precision is mixed.
  class ForwardGuard {
   public:
    ForwardGuard(const Precision& p, bool cuda);
    ~ForwardGuard();
    ForwardGuard(const ForwardGuard&) = delete;
    ForwardGuard& operator=(const ForwardGuard&) = delete;

   private:
    bool active_;
    bool cuda_;
    bool prev_;
  };
  ForwardGuard forward_guard(bool cuda) const { return ForwardGuard(*this, cuda); }

  static at::ScalarType dtype_from_name(const std::string& name, const std::string& key);

  // ---- loss scaling ("16-mixed"; identity for the other precisions) ---------------------------
  /// Creates the loss scaler of "16-mixed" (no-op otherwise). `any_rank` returns true on every rank
  /// if its argument is true on any rank: the owning Strategy's collective, since under FSDP each
  /// rank holds other gradient pieces and skipping a step must be decided together.
  void enable_loss_scaling(std::function<bool(bool)> any_rank);
  /// The loss to call backward on: loss * scale under "16-mixed", else `loss` itself.
  torch::Tensor scale_loss(const torch::Tensor& loss) const;
  /// One optimizer step: unscales the gradients (collective under "16-mixed"), runs `before_step`
  /// (hooks and clipping see true gradients, as in Lightning), then `step` unless a gradient was
  /// inf/nan on some rank. Returns whether the optimizer stepped.
  bool optimizer_step(torch::optim::Optimizer& optimizer, const std::function<void()>& before_step,
                      const std::function<void()>& step);
  /// The scaler's state (an empty map without one), saved in checkpoints.
  YAML::Node state_dict() const override;
  /// Restores state_dict(); a checkpoint without scaler state leaves the scaler as it is.
  void load_state_dict(const YAML::Node& state) override;
  /// The loss scaler (null unless "16-mixed"); for inspection.
  const GradScaler* grad_scaler() const { return scaler_.get(); }

 private:
  std::shared_ptr<GradScaler> scaler_;  // shared: Precision stays copyable; one Strategy uses it
  std::string name_;
  bool mixed_ = false;
  at::ScalarType param_dtype_ = at::kFloat;
  at::ScalarType compute_dtype_ = at::kFloat;
};

}  // namespace volt
