#pragma once
/// Next-token cross-entropy over a large vocabulary without float32 copies of the whole logits.
///
/// [Note: cross-entropy with its gradient made in the forward]
/// `F.cross_entropy(logits.float(), labels)` on bf16 logits [N, V] writes a float32 copy, then
/// float32 log-probabilities that autograd keeps; its backward writes a float32 gradient of those,
/// a float32 gradient of the logits and the bf16 cast of it: about twelve float32-sized passes over
/// [N, V] and up to three float32 [N, V] tensors alive at once. At 8 x 2048 tokens [N, V] in float32
/// is 2.1 GB for a vocabulary of 32,000 and 8.4 GB for Llama 3's 128,256.
///
/// The loss is the end of the graph, so its gradient is known in the forward up to the incoming
/// scalar: d loss / d logits = (softmax - onehot(label)) * g / count, zero on ignored rows. This
/// function works through the rows in chunks of about 128 MB of float32: each chunk is cast,
/// log-softmaxed, its labels' log-probabilities gathered for the loss, and exp(log-probs) written
/// straight into a gradient buffer of the logits' dtype (the labels' entries p - 1 written from
/// float32). The backward multiplies that buffer by g / count row-wise (zero on ignored rows) into
/// the logits' gradient. About seven float32-sized passes instead of twelve. Autograd keeps one
/// [N, V] tensor in the logits' dtype (half the bytes of the float32 log-probabilities for bf16;
/// float32 for fp16, whose range cannot hold the unscaled probabilities); the backward's peak is that
/// and the gradient it writes; the forward's transient float32 memory is at most two chunks (the cast and
/// its log-softmax), not [N, V].
/// A double backward (create_graph) is refused: the gradient is not built from differentiable ops.
///
/// Values equal F.cross_entropy(logits.float(), labels, ignore_index) to float32 rounding (the loss
/// is the mean over non-ignored rows, summed in another order); all rows ignored gives a nan loss, as
/// there, and a zero gradient.
///
/// Thread-safety: a pure function.
#include <torch/types.h>

namespace volt::demos {

/// Mean cross-entropy of `logits` [..., V] (any floating dtype; computed in float32) against
/// `labels` [...] (int64, the same leading shape, on the same device), skipping labels equal to
/// `ignore_index`. Throws DataError for a mismatch or (on the CPU) a label outside [0, V). Returns
/// a float32 scalar, differentiable in `logits` when they require a gradient ([Note: cross-entropy
/// with its gradient made in the forward]). `chunk_bytes`: the float32 bytes of one chunk of rows
/// (at least one row per chunk).
torch::Tensor token_cross_entropy(const torch::Tensor& logits, const torch::Tensor& labels, int64_t ignore_index = -100,
                                  int64_t chunk_bytes = int64_t{128} << 20);

}  // namespace volt::demos
