#pragma once
/// volt's fused host step for torch::optim::Adam and AdamW.
///
/// torch::optim's Adam/AdamW run about ten tensor ops per parameter, each a pass over memory, and
/// allocate two temporaries the size of the parameter. On the host (CPU training, and FSDP's
/// cpu_offload, where the optimizer steps on the host shards) that is most of the step's time. The
/// fused step reads and writes each element once, on all intra-op threads, with the same update
/// rule, the same options (lr, betas, eps, weight_decay, amsgrad, per param group) and the same
/// state objects (AdamParamState / AdamWParamState in optimizer.state()), so checkpoints, LR
/// schedulers and a later optimizer.step() see no difference. Results agree with torch::optim to
/// float rounding (the order of two float operations may differ where the CPU has FMA).
///
/// Strategies call it in optimizer_step(); the user's optimizer is used unchanged otherwise.
#include <torch/optim/optimizer.h>

namespace volt {

/// True when fused_adam_step would step `optimizer`: exactly torch::optim::Adam or AdamW (not a
/// subclass, whose step() may differ), and every parameter with a gradient, its gradient and its
/// state are dense, contiguous fp32 CPU tensors.
bool fused_adam_supported(torch::optim::Optimizer& optimizer);

/// Steps `optimizer` with the fused kernel and returns true, or returns false without touching
/// anything when not fused_adam_supported (call optimizer.step() then). Not thread-safe with respect
/// to other uses of the same optimizer; uses ATen's intra-op thread pool.
bool fused_adam_step(torch::optim::Optimizer& optimizer);

}  // namespace volt
