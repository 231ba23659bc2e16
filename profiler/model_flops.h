#pragma once
/// A model's parameter count and its training FLOPs per token, counted as torchtitan counts them
/// (its get_num_flop_per_token), for MFU figures: 6 per parameter that takes part in a matmul
/// (2 in forward, 4 in backward) plus 12 * layers * heads * head_dim * seq_len for attention's
/// score and value matmuls. Embedding lookups are no matmul: their parameters are left out of the
/// 6N term; causal masking is not discounted; recomputation (activation checkpointing, flash
/// attention's backward) is not counted.
///
/// Thread-safety: pure functions.
#include <cstdint>

namespace torch::nn {
class Module;
}

namespace volt {

struct ParameterCount {
  int64_t total = 0;      ///< every parameter tensor once (a tensor registered twice, as tied weights, once)
  int64_t embedding = 0;  ///< those only embedding modules hold (a weight tied to an output layer is a matmul's)
  int64_t non_embedding() const { return total - embedding; }
};

/// Counts `module`'s parameters by their shapes. Right while a strategy holds them sharded (FSDP
/// keeps each parameter's shape during fit, with its storage freed, so count after
/// configure_model(), e.g. in on_train_start); after FSDP's teardown they are empty tensors until
/// unshard_module. Embedding modules: torch::nn::Embedding, also inside volt::hooked(...).
ParameterCount count_parameters(const torch::nn::Module& module);

/// torchtitan's training FLOPs per token: 6 * non_embedding_params + 12 * attention_layers * heads
/// * head_dim * seq_len. `attention_layers`: attention blocks each token goes through (a decoder:
/// its layers; an encoder-decoder: encoder self-attention, decoder self- and cross-attention).
double flops_per_token(int64_t non_embedding_params, int64_t attention_layers, int64_t heads, int64_t head_dim,
                       int64_t seq_len);

}  // namespace volt
