#pragma once
/// Runs `fn` each time autograd has accumulated a gradient into `param` (a post-hook on the
/// parameter's AccumulateGrad node). Returns the node: keep it alive for as long as the hook
/// should live, since the tensor only holds it weakly. Used by DDP (bucket launch) and FSDP
/// (reduce-scatter when a unit's gradients are complete).
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/types.h>

#include <functional>
#include <memory>

namespace volt::detail {

class GradReadyHook : public torch::autograd::FunctionPostHook {
 public:
  explicit GradReadyHook(std::function<void()> fn) : fn_(std::move(fn)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    fn_();
    return outputs;
  }

 private:
  std::function<void()> fn_;
};

inline std::shared_ptr<torch::autograd::Node> add_grad_ready_hook(const torch::Tensor& param,
                                                                  std::function<void()> fn) {
  auto acc = torch::autograd::impl::grad_accumulator(param);
  acc->add_post_hook(std::make_unique<GradReadyHook>(std::move(fn)));
  return acc;
}

}  // namespace volt::detail
