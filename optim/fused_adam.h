#pragma once
/// volt's fused steps for torch::optim::Adam and AdamW.
///
/// torch::optim's Adam/AdamW run about ten tensor ops per parameter, each a pass over memory (on a
/// GPU, ten kernel launches per parameter), and allocate two temporaries the size of the
/// parameter. The fused step reads and writes each element once, with the same update rule, the
/// same options (lr, betas, eps, weight_decay, amsgrad, per param group) and the same state objects
/// (AdamParamState / AdamWParamState in optimizer.state()), so checkpoints, LR schedulers and a
/// later optimizer.step() see no difference. Two kernels (AdamStepPath):
///   - Host: volt's own single-pass loop over fp32 CPU tensors (CPU training, FSDP's cpu_offload),
///     the elements of all the parameters stepped split across at::get_num_threads() threads of its
///     own (core/host_parallel.h: at::parallel_for would run on one thread in volt's code). It
///     keeps torch::optim's order of float operations: results agree to float rounding (the order
///     of two operations may differ where the CPU has FMA).
///   - ATen: PyTorch's fused multi-tensor kernel (at::_fused_adam_ / at::_fused_adamw_, behind
///     compat::fused_adam_), where this LibTorch has it (compat.h: CUDA since 2.1, CPU since 2.4):
///     fp32, bf16 or fp16 CUDA parameters, and 16-bit CPU ones the host loop does not take. It
///     computes in fp32 (lerp for the first moment): results agree with torch::optim to about
///     1e-7 relative, not bit for bit.
///   - Step: anything else, with the optimizer's own step().
///
/// Strategies call it in optimizer_step(); the user's optimizer is used unchanged otherwise.
/// Not thread-safe with respect to other uses of the same optimizer.
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <vector>

namespace volt {

/// Which kernel steps an optimizer (see the file comment).
enum class AdamStepPath { Host, ATen, Step };
/// "host", "aten" or "step".
const char* to_string(AdamStepPath path);

/// The path fused_adam_step takes for `optimizer` now: Host or ATen only for exactly
/// torch::optim::Adam or AdamW (not a subclass, whose step() may differ) when every parameter with
/// a gradient, its gradient and its state are dense contiguous tensors the kernel takes; otherwise
/// Step.
AdamStepPath fused_adam_path(torch::optim::Optimizer& optimizer);

/// True when fused_adam_step would step `optimizer` (fused_adam_path is not Step).
bool fused_adam_supported(torch::optim::Optimizer& optimizer);

/// Steps `optimizer` with the fused kernel and returns true, or returns false without touching
/// anything when fused_adam_path is Step (call optimizer.step() then). Uses at::get_num_threads()
/// threads (the host path's own, or ATen's).
bool fused_adam_step(torch::optim::Optimizer& optimizer);

/// Steps `optimizer` by `path` whatever fused_adam_path says (tests compare the paths). Host or ATen
/// on an optimizer or tensors they do not take throw c10::Error before touching anything; Step is
/// optimizer.step().
void fused_adam_step(torch::optim::Optimizer& optimizer, AdamStepPath path);

/// Steps only `params` (some of `optimizer`'s parameters), each exactly as a whole step would step
/// it, the others untouched: the path is fused_adam_path's for these parameters; on Step, each param
/// group is cut down to them for one optimizer.step(), which fits every optimizer whose update is
/// per element (SGD, Adam, AdamW, RMSprop, Adagrad; not LBFGS). FSDP's optimizer_in_backward steps
/// one unit's shard this way as soon as its gradient is ready. Returns the path taken.
AdamStepPath step_parameters(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& params);

/// Bytes of Adam/AdamW state tensors (moments and amsgrad maxima) the optimizer holds; 0 for other
/// optimizers.
int64_t adam_state_bytes(torch::optim::Optimizer& optimizer);

}  // namespace volt
