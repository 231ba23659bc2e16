#pragma once
/// The feed-forward block's `dropout(relu(h))` as one autograd node that keeps only its output.
///
/// [Note: ReLU and dropout that keep one tensor]
/// Composed, autograd keeps three tensors of the hidden width for these two ops: relu's output
/// (for its backward), dropout's mask (a byte per element on CUDA, an element of h's dtype on the
/// CPU) and dropout's output (kept by linear2 as its input). The output y alone determines both
/// backwards: with scale = 1 / (1 - p) >= 1, y > 0 exactly where the element was kept and relu's
/// input was positive, and the gradient is
///   dh = g * scale  where y > 0,  0 elsewhere,
/// which is what dropout's backward (g * mask * scale) followed by relu's (zero where relu's
/// output is 0) gives. So the node keeps y, which linear2 keeps anyway: 2 of the 3 tensors are
/// gone (for the 1 B demo at 8 x 256 tokens under bf16-mixed, about 1.6 GB of 7.8 GB of
/// activations). The forward calls the same ops as the composition, so outputs and random draws
/// are identical; the backward runs the kernels eager's would (on the CPU and CUDA), with the mask
/// (y > 0) made in backward, so the gradient is identical too, bitwise up to the sign of zeros, for
/// finite values: where h or the incoming gradient is inf or NaN, a dropped or negative element may
/// get 0 where eager's gets NaN, or the reverse (the step's other gradients carry the non-finite
/// value all the same, so overflow checks still see it). Since y is saved, changing it in place
/// before backward is an error, as for any saved tensor.
///
/// Thread-safety: a pure function.
#include <torch/types.h>

namespace volt::demos {

/// torch::dropout(torch::relu(h), p, train), with the memory of [Note: ReLU and dropout that keep
/// one tensor]. Differentiable in h, twice too. Throws ConfigError for p outside [0, 1].
torch::Tensor relu_dropout(const torch::Tensor& h, double p, bool train);

}  // namespace volt::demos
