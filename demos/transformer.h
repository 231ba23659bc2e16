#pragma once
/// Lightning's demo language model (`lightning.pytorch.demos.Transformer`) in C++: a shared embedding
/// scaled by sqrt(ninp), sinusoidal positional encoding, a full encoder-decoder `nn.Transformer`
/// (post-norm, ReLU, batch_first), a causal target mask, Linear(ninp, vocab) and log_softmax.
///
/// Parameter names, shapes, order and initialization are PyTorch's, so a state_dict maps one-to-one
/// (`embedding.weight`, `transformer.encoder.layers.0.self_attn.in_proj_weight`, ...). The encoder
/// and decoder layers are HookedModules, the units strategies wrap (FSDP, activation checkpointing).
/// Attention is plain matmuls, so it runs in fp32, bf16 and under autocast alike.
///
/// Thread-safety: as torch::nn::Module (one forward at a time per module).
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "volt/core/hooked_module.h"
#include "volt/core/hooked_wrapper.h"

namespace volt::demos {

/// The Transformer's constructor arguments, with Lightning's defaults (WikiText-2 vocabulary).
struct TransformerOptions {
  int64_t vocab_size = 33278;
  int64_t ninp = 200;  ///< d_model: embedding and attention width
  int64_t nhead = 2;
  int64_t nhid = 200;   ///< dim_feedforward
  int64_t nlayers = 2;  ///< encoder layers, and as many decoder layers
  double dropout = 0.2;

  template <class V>
  void visit(V& v) {
    v("vocab_size", vocab_size)("ninp", ninp)("nhead", nhead)("nhid", nhid)("nlayers", nlayers)("dropout", dropout);
  }
  /// Throws ConfigError naming `<prefix>.<field>` for an impossible architecture.
  void validate(const std::string& prefix = "model") const;
};

/// torch.nn.MultiheadAttention (batch_first, bias, no bias_kv, same q/k/v width): parameters
/// `in_proj_weight` [3E, E], `in_proj_bias` [3E], `out_proj.{weight,bias}`; attention dropout.
class MultiheadAttention : public torch::nn::Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout);
  /// query [B, T, E], key/value [B, S, E]; `attn_mask` an additive float mask [T, S] or undefined.
  torch::Tensor forward(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                        const torch::Tensor& attn_mask = {});

  torch::Tensor in_proj_weight, in_proj_bias;
  torch::nn::Linear out_proj{nullptr};

 private:
  int64_t embed_dim_, num_heads_;
  double dropout_;
};

/// torch.nn.TransformerEncoderLayer (post-norm, ReLU). Forward inputs: src [B, T, E] and an
/// additive float src_mask [T, T] (all zeros for none). The feed-forward block's ReLU and dropout
/// are one relu_dropout node, which keeps one tensor of the hidden width instead of three
/// ([Note: ReLU and dropout that keep one tensor]); values and gradients are PyTorch's.
class TransformerEncoderLayer : public HookedModule {
 public:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, int64_t dim_feedforward, double dropout);
  torch::Tensor forward(const torch::Tensor& src, const torch::Tensor& src_mask);

  std::shared_ptr<MultiheadAttention> self_attn;
  torch::nn::Linear linear1{nullptr}, linear2{nullptr};
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};

 private:
  torch::Tensor body(const torch::Tensor& src, const torch::Tensor& src_mask);
  double dropout_;
};

/// torch.nn.TransformerDecoderLayer (post-norm, ReLU). Forward inputs: tgt [B, T, E], memory
/// [B, S, E] and an additive float tgt_mask [T, T]; the cross-attention is unmasked and projects
/// k and v from the memory in one matmul, as PyTorch does. ReLU and dropout as in the encoder layer.
class TransformerDecoderLayer : public HookedModule {
 public:
  TransformerDecoderLayer(int64_t d_model, int64_t nhead, int64_t dim_feedforward, double dropout);
  torch::Tensor forward(const torch::Tensor& tgt, const torch::Tensor& memory, const torch::Tensor& tgt_mask);

  std::shared_ptr<MultiheadAttention> self_attn, multihead_attn;
  torch::nn::Linear linear1{nullptr}, linear2{nullptr};
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr}, norm3{nullptr};

 private:
  torch::Tensor body(const torch::Tensor& tgt, const torch::Tensor& memory, const torch::Tensor& tgt_mask);
  double dropout_;
};

/// Called with each unit of the model as soon as it is built and initialised (the embedding, every
/// encoder and decoder layer, the output layer), in build order: LightningModule::wrap, so FSDP can
/// shard it before the next one exists. Empty: nothing is called.
using UnitBuilt = std::function<void(torch::nn::Module&)>;

/// torch.nn.TransformerEncoder: `layers.N.*` then a final `norm`.
class TransformerEncoder : public torch::nn::Module {
 public:
  /// `nlayers` layers (o.nlayers by default; 0: the caller adds them with add_layer).
  explicit TransformerEncoder(const TransformerOptions& o, std::optional<int64_t> nlayers = std::nullopt);
  void add_layer(std::shared_ptr<TransformerEncoderLayer> layer);
  torch::Tensor forward(const torch::Tensor& src, const torch::Tensor& mask);
  std::vector<std::shared_ptr<TransformerEncoderLayer>> layers;
  torch::nn::LayerNorm norm{nullptr};
};

/// torch.nn.TransformerDecoder: `layers.N.*` then a final `norm`.
class TransformerDecoder : public torch::nn::Module {
 public:
  explicit TransformerDecoder(const TransformerOptions& o, std::optional<int64_t> nlayers = std::nullopt);
  void add_layer(std::shared_ptr<TransformerDecoderLayer> layer);
  torch::Tensor forward(const torch::Tensor& tgt, const torch::Tensor& memory, const torch::Tensor& tgt_mask);
  std::vector<std::shared_ptr<TransformerDecoderLayer>> layers;
  torch::nn::LayerNorm norm{nullptr};
};

/// torch.nn.Transformer(batch_first=True) without its own forward logic beyond encoder -> decoder.
/// Construction applies xavier_uniform_ to every parameter with dim > 1, as PyTorch's does.
class EncoderDecoder : public torch::nn::Module {
 public:
  /// With `built`, layer by layer (see build_layer_by_layer): the same values, bit for bit.
  explicit EncoderDecoder(const TransformerOptions& o, const UnitBuilt& built = {});
  torch::Tensor forward(const torch::Tensor& src, const torch::Tensor& tgt, const torch::Tensor& tgt_mask);
  std::shared_ptr<TransformerEncoder> encoder;
  std::shared_ptr<TransformerDecoder> decoder;

 private:
  void build_layer_by_layer(const TransformerOptions& o, const UnitBuilt& built);
};

/// The longest sequence the demo model takes (its positional table, as Lightning's demo).
inline constexpr int64_t kMaxSequenceLength = 5000;

/// Sinusoidal positional encoding plus dropout. The table (max_len x dim) is computed on first use
/// on the input's device and is not a parameter or buffer, so it is absent from the state_dict.
/// Deliberate difference from Lightning's demo: position t gets row t of the table (`pe[:, :T]`),
/// while Lightning's code adds the single row `pe[:, T]` to every position (a bug there). The
/// golden values (tests/golden/make_demo_golden.py) are computed with the corrected form.
class PositionalEncoding : public torch::nn::Module {
 public:
  PositionalEncoding(int64_t dim, double dropout, int64_t max_len = kMaxSequenceLength);
  /// x [B, T, dim] -> dropout(x + pe[:T]).
  torch::Tensor forward(const torch::Tensor& x);

 private:
  int64_t dim_, max_len_;
  double dropout_;
  torch::Tensor pe_;  // [1, max_len, dim], fp32, on the device of the last input
};

/// The demo model. forward(inputs, target) -> log-probabilities [B*T, vocab_size].
class Transformer : public torch::nn::Module {
 public:
  /// `built` (optional): called with each unit as soon as it is built (UnitBuilt). The values do not
  /// depend on it: built whole or unit by unit, the same seed gives the same model.
  explicit Transformer(TransformerOptions options = {}, const UnitBuilt& built = {});
  /// inputs, target: int64 [B, T] token ids. `mask` is the additive target mask [T, T]; by default
  /// the causal mask (-inf above the diagonal).
  torch::Tensor forward(const torch::Tensor& inputs, const torch::Tensor& target, torch::Tensor mask = {});

  /// nn.Transformer.generate_square_subsequent_mask: float [t, t], 0 on and below the diagonal,
  /// -inf above.
  static torch::Tensor generate_square_subsequent_mask(int64_t t, torch::Device device = torch::kCPU);

  const TransformerOptions& options() const { return options_; }
  /// The encoder and decoder layers, in forward order (the units a strategy wraps).
  std::vector<std::shared_ptr<HookedModule>> layers() const;

  std::shared_ptr<PositionalEncoding> pos_encoder;
  /// Stock layers wrapped (volt::hooked, same parameter names) so FSDP can make them units.
  Hooked<torch::nn::Embedding> embedding{nullptr};
  std::shared_ptr<EncoderDecoder> transformer;
  Hooked<torch::nn::Linear> decoder{nullptr};

 private:
  TransformerOptions options_;
};

}  // namespace volt::demos
