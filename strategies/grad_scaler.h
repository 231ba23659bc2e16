#pragma once
/// Loss scaling for "16-mixed" (fp16 autocast), as torch.amp.GradScaler and FSDP's
/// ShardedGradScaler: the loss is multiplied by `scale` before backward so small fp16 gradients do
/// not underflow; before clipping and the optimizer step the gradients are divided by it again and
/// checked for inf/nan on *every* rank (under FSDP each rank holds other gradient pieces, so the
/// decision to skip a step is collective). A step with inf/nan is skipped and the scale backs off;
/// after `growth_interval` clean steps it grows. Its state is checkpointed.
///
/// Owned by the Strategy (its precision's state). Thread-safety: one training thread.
#include <torch/optim/optimizer.h>
#include <yaml-cpp/yaml.h>

#include <functional>

namespace volt {

struct GradScalerOptions {
  double init_scale = 65536.0;  // PyTorch's defaults
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class GradScaler {
 public:
  /// `any_rank` returns true on every rank if its argument is true on any rank (a collective).
  explicit GradScaler(
      GradScalerOptions options = {}, std::function<bool(bool)> any_rank = [](bool b) { return b; });

  double scale() const { return scale_; }
  /// loss * scale.
  torch::Tensor scale_loss(const torch::Tensor& loss) const;
  /// Divides the optimizer's gradients by the scale (once per step) and records whether any rank
  /// has an inf or nan among its gradients. Collective.
  void unscale(torch::optim::Optimizer& optimizer);
  bool found_inf() const { return found_inf_; }
  /// Unscales if not done yet; steps the optimizer unless a gradient was inf/nan; updates the
  /// scale. Returns whether the optimizer stepped.
  bool step(torch::optim::Optimizer& optimizer, const std::function<void()>& optimizer_step);

  YAML::Node state_dict() const;
  void load_state_dict(const YAML::Node& state);

 private:
  void update();
  GradScalerOptions options_;
  std::function<bool(bool)> any_rank_;
  double scale_;
  int64_t growth_tracker_ = 0;
  bool unscaled_ = false;
  bool found_inf_ = false;
};

}  // namespace volt
