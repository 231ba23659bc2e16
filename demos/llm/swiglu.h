#pragma once
/// SwiGLU's gate, silu(gate) * up, as one autograd node.
///
/// [Note: SwiGLU that keeps its inputs only]
/// Written as torch::silu(gate) * up, autograd keeps three tensors of the MLP's hidden width for
/// backward: gate (for silu), and silu's output and up (for the product). silu's output is a
/// function of gate, so this node keeps gate and up only and recomputes it in backward: one
/// [tokens, intermediate_size] tensor less per layer (256 MB in bf16 at 8 x 2048 tokens and an
/// intermediate size of 8192; 4 GB over the 1.14 B Llama's 16 layers).
/// - On the CPU, and on CUDA without runtime-compiled kernels, the forward is silu then an in-place
///   product and the backward the same ATen kernels autograd runs for the two-op form (silu
///   recomputed, grad * silu, grad * up, silu_backward): bit for bit the two-op form's values.
/// - On CUDA with compat::kJitElementwise, one kernel each way (NVRTC through ATen's jiterator):
///   forward reads gate and up and writes the product; backward reads the gradient, gate and up and
///   writes both input gradients. Two kernels instead of five, about 2.0 GB of memory traffic per
///   layer instead of 3.6 at that shape. Computed in float32 without rounding silu's output and
///   gate's gradient factor to the input dtype in between, so bf16 results may differ from the
///   two-op form in the last bit (the tests bound it).
/// A double backward (create_graph) differentiates the ATen form.
///
/// Thread-safety: pure functions.
#include <torch/types.h>

namespace volt::demos {

/// silu(gate) * up, keeping gate and up for backward ([Note: SwiGLU that keeps its inputs only]).
/// `fused`: use the runtime-compiled CUDA kernels (CUDA tensors where compat::kJitElementwise;
/// see swiglu_kernels_work). Inputs of different shapes or dtypes take the two-op form.
torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up, bool fused = false);

/// Whether the runtime-compiled SwiGLU kernels compile and run for CUDA tensors like these: runs
/// both (forward and backward) once on them, outside autograd. False, with a warning naming the
/// error, where NVRTC fails; false without one for CPU tensors or a build without the kernels.
bool swiglu_kernels_work(const torch::Tensor& gate, const torch::Tensor& up);

}  // namespace volt::demos
