#pragma once
/// A Llama-style decoder-only Transformer (docs/llm.md): pre-norm RMSNorm, rotary position
/// embeddings (Hugging Face's rotate_half convention), grouped-query attention, SwiGLU MLP, no
/// biases, optional tied input/output embeddings. Module and parameter names are Hugging Face's
/// `LlamaModel` names (`embed_tokens`, `layers.N.self_attn.q_proj`, ..., `norm`), so that a state
/// dict maps one-to-one onto Llama code; `LlamaLM` (llama_lm.h) adds `lm_head` and the training.
///
/// Attention runs `scaled_dot_product_attention(is_causal)` on CUDA (the flash kernels, through
/// core/compat.h) and an exact float32-softmax path elsewhere, the path the Python reference
/// (`demos/llm/reference/llama_ref.py`) takes, so that the CPU matches it to rounding.
///
/// Thread-safety: as torch::nn::Module (one forward at a time per module).
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "volt/core/hooked_module.h"
#include "volt/core/hooked_wrapper.h"
#include "volt/demos/llm/rotary.h"

namespace volt::demos {

/// Hugging Face's LlamaConfig keys, with the defaults of docs/llm.md.
struct LlamaOptions {
  int64_t vocab_size = 0;  ///< 0: the tokenizer's vocabulary (the CLI links data.vocab_size)
  int64_t hidden_size = 256;
  int64_t intermediate_size = 0;  ///< 0: 256 * ceil((8 * hidden_size / 3) / 256), Llama's rule
  int64_t num_hidden_layers = 4;
  int64_t num_attention_heads = 8;
  int64_t num_key_value_heads = 0;  ///< 0: num_attention_heads (no grouping)
  int64_t max_position_embeddings = 2048;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-5;
  bool tie_word_embeddings = false;
  double initializer_range = 0.02;
  double attention_dropout = 0.0;

  template <class V>
  void visit(V& v) {
    v("vocab_size", vocab_size)("hidden_size", hidden_size)("intermediate_size", intermediate_size)(
        "num_hidden_layers", num_hidden_layers)("num_attention_heads", num_attention_heads)(
        "num_key_value_heads", num_key_value_heads)("max_position_embeddings", max_position_embeddings)(
        "rope_theta", rope_theta)("rms_norm_eps", rms_norm_eps)("tie_word_embeddings", tie_word_embeddings)(
        "initializer_range", initializer_range)("attention_dropout", attention_dropout);
  }
  /// Throws ConfigError naming `<prefix>.<field>` for an impossible shape (vocab_size 0 included:
  /// resolve it first).
  void validate(const std::string& prefix = "model") const;

  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  int64_t kv_heads() const { return num_key_value_heads > 0 ? num_key_value_heads : num_attention_heads; }
  int64_t ffn_size() const;
  /// Parameters of the model built from these options (a tied weight counted once).
  int64_t num_parameters() const;
  /// Training FLOPs per token as torchtitan counts them: 6 x (parameters without the input
  /// embedding; a tied one counts, as lm_head's matmul) + 12 x layers x heads x head_dim x seq_len
  /// (attention's score and value matmuls).
  double flops_per_token(int64_t seq_len) const;
};

/// Keys and values of earlier positions, per layer, for generation: [B, KV heads, capacity, hd].
struct KVCache {
  std::vector<torch::Tensor> k, v;
  int64_t length = 0;    ///< positions filled
  int64_t capacity = 0;  ///< positions allocated
};

/// y = weight * normalize(x) in float32, cast back to x's dtype first (Hugging Face's order). On a
/// GPU with LibTorch 2.4+, when weight has x's dtype, at::rms_norm's kernel (the product in float32,
/// cast once: equal to Hugging Face's within bf16 rounding).
class RMSNorm : public torch::nn::Module {
 public:
  RMSNorm(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;

 private:
  double eps_;
};

/// q/k/v/o projections, rotary embeddings, grouped-query causal attention.
/// Whether a module's runtime-compiled CUDA kernels (rotary.h, swiglu.h) run: checked at its first
/// CUDA call, then used (Fused) or not (Aten) from then on.
enum class JitKernels { Unchecked, Fused, Aten };

class LlamaAttention : public torch::nn::Module {
 public:
  explicit LlamaAttention(const LlamaOptions& o);
  /// x [B, T, d]; rope: rotary_table (rotary.h) for positions cache.length .. +T (or 0 .. T
  /// without a cache);
  /// `cache` (may be null) receives this call's keys and values at `layer`.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& rope, KVCache* cache = nullptr, int64_t layer = 0);
  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};

 private:
  int64_t heads_, kv_heads_, head_dim_;
  double dropout_;
  JitKernels kernels_ = JitKernels::Unchecked;  // the rotation's (rotary.h)
};

/// down_proj(silu(gate_proj(x)) * up_proj(x)).
class LlamaMLP : public torch::nn::Module {
 public:
  LlamaMLP(int64_t dim, int64_t hidden);
  /// down_proj(swiglu(gate_proj(x), up_proj(x))): demos/llm/swiglu.h. Its first CUDA call checks
  /// whether the runtime-compiled SwiGLU kernels run here and uses them from then on if they do.
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};

 private:
  JitKernels kernels_ = JitKernels::Unchecked;
};

/// One pre-norm block: the unit FSDP shards and activation checkpointing recomputes.
class LlamaDecoderLayer : public HookedModule {
 public:
  explicit LlamaDecoderLayer(const LlamaOptions& o);
  /// Training and evaluation (through the strategies' interceptors).
  torch::Tensor forward(const torch::Tensor& h, const torch::Tensor& rope);
  /// Generation with a KV cache (no interceptors: the model is whole).
  torch::Tensor forward_cached(const torch::Tensor& h, const torch::Tensor& rope, KVCache& cache, int64_t layer);

  std::shared_ptr<LlamaAttention> self_attn;
  std::shared_ptr<LlamaMLP> mlp;
  std::shared_ptr<RMSNorm> input_layernorm, post_attention_layernorm;

 private:
  torch::Tensor body(const torch::Tensor& h, const torch::Tensor& rope, KVCache* cache, int64_t layer);
};

/// Called as each decoder layer is complete (FSDP shards it at once; see LightningModule::wrap).
using LayerBuilt = std::function<void(torch::nn::Module&)>;

/// Hugging Face's LlamaModel: embed_tokens, layers, norm. Returns the final hidden states.
class LlamaModel : public torch::nn::Module {
 public:
  /// Builds and initializes every layer (normal(0, initializer_range), norms 1), layer by layer,
  /// calling `built` after each decoder layer.
  explicit LlamaModel(const LlamaOptions& o, const LayerBuilt& built = {});
  /// input_ids [B, T] int64 -> hidden states [B, T, d]; with a cache, positions continue it.
  torch::Tensor forward(const torch::Tensor& input_ids, KVCache* cache = nullptr);
  /// An empty cache for `batch` sequences of up to `capacity` positions, on the model's device
  /// and in its dtype.
  KVCache make_cache(int64_t batch, int64_t capacity) const;

  /// Hooked, so that a policy may make it a unit ("Embedding"); `weight()` is its weight.
  Hooked<torch::nn::Embedding> embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  std::shared_ptr<RMSNorm> norm;
  const LlamaOptions& options() const { return options_; }
  /// The input embedding's weight [vocab, d].
  const torch::Tensor& embedding_weight() const { return embedding_weight_; }

 private:
  LlamaOptions options_;
  torch::Tensor embedding_weight_;
};

}  // namespace volt::demos
