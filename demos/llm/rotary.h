#pragma once
/// Rotary position embeddings (RoPE) in Hugging Face's rotate_half convention: channels i and
/// i + hd/2 of each head rotate together by the angle pos * theta^(-2i/hd).
///
/// [Note: rotary embeddings in two kernels]
/// Hugging Face writes x * cos + rotate_half(x) * sin with rotate_half(x) = cat(-x2, x1): five
/// kernels forward (two of them on strided halves) and about ten backward, where autograd
/// zero-fills and sums the halves' gradients. A profile of the 1.14 B Llama on an H200 put about
/// 26 ms of a 270 ms step in them. Seen as [.., 2, hd/2], the rotation is
///   out = x1 * a + x2 * b,   a = [c; s],  b = [-s; c]   (rows: first half, second half)
/// with x1 and x2 the halves broadcast over that dimension of 2 (views, no copies) and c, s the
/// half tables: a mul and an addcmul, the same products Hugging Face's form takes, so equal to it to
/// rounding (two roundings in bf16 where Hugging Face's form has three). The backward is the inverse
/// rotation, the same two kernels with a' = [c; -s] and b' = [s; c], so autograd keeps only the
/// table. One table holds all four: R = [[c, -s], [s, c]] of shape [T, 1, 2, 2, hd/2], whose
/// columns are a and b and whose rows are a' and b' (views). The rotation runs on [B, T, H, hd] as
/// the projections lay it out, before q and k are transposed for attention. On CUDA, where the
/// build has runtime-compiled kernels, the mul and the addcmul are one kernel each way (x1 * a +
/// x2 * b in float32, rounded once): half the kernels and about 40% of the memory traffic.
///
/// Thread-safety: pure functions.
#include <torch/types.h>

namespace volt::demos {

/// The rotary table for positions [start, start + len) of heads of width `head_dim` (even):
/// R = [[c, -s], [s, c]], [len, 1, 2, 2, head_dim / 2] (broadcast over batch and heads) in `dtype`,
/// where c = cos(pos * inv_freq) and s = sin(pos * inv_freq) are computed in float32 as Hugging Face
/// does ([Note: rotary embeddings in two kernels]). Throws ConfigError for an odd head_dim, negative
/// positions or a theta that is not a finite number > 1.
torch::Tensor rotary_table(int64_t start, int64_t len, int64_t head_dim, double theta, const torch::Device& device,
                           torch::Dtype dtype);

/// x [B, T, H, hd] (positions along dim 1) rotated by rotary_table's R for those T positions:
/// Hugging Face's x * cos + rotate_half(x) * sin, to rounding. Differentiable in x, twice too (the
/// rotation is linear); the table takes no gradient (one that requires it is refused). Throws
/// DataError when the shapes do not match. `fused`: on CUDA where compat::kJitElementwise, one
/// runtime-compiled kernel each way instead of two (see rotary_kernel_works); ignored elsewhere.
torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& rope, bool fused = false);

/// Whether the runtime-compiled rotation compiles and runs for CUDA tensors like `x` (runs it once
/// on x's first sequence, outside autograd). False, with a warning naming the error, where NVRTC
/// fails; false without one for CPU tensors or a build without the kernels.
bool rotary_kernel_works(const torch::Tensor& x, const torch::Tensor& rope);

}  // namespace volt::demos
