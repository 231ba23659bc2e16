#include "volt/demos/transformer.h"

#include <torch/nn/init.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "volt/core/compat.h"
#include "volt/core/errors.h"
#include "volt/demos/relu_dropout.h"

namespace volt::demos {

namespace F = torch::nn::functional;

void TransformerOptions::validate(const std::string& prefix) const {
  auto key = [&](const char* field) { return prefix.empty() ? std::string(field) : prefix + "." + field; };
  VOLT_CHECK(vocab_size >= 1, ConfigError, "config key '", key("vocab_size"), "': must be >= 1, got ", vocab_size);
  VOLT_CHECK(ninp >= 2 && ninp % 2 == 0, ConfigError, "config key '", key("ninp"),
             "': must be a positive even number (the sinusoidal positional encoding pairs sin/cos), got ", ninp);
  VOLT_CHECK(nhead >= 1, ConfigError, "config key '", key("nhead"), "': must be >= 1, got ", nhead);
  VOLT_CHECK(ninp % nhead == 0, ConfigError, "config key '", key("nhead"), "': must divide ", key("ninp"), " (", ninp,
             "), got ", nhead);
  VOLT_CHECK(nhid >= 1, ConfigError, "config key '", key("nhid"), "': must be >= 1, got ", nhid);
  VOLT_CHECK(nlayers >= 1, ConfigError, "config key '", key("nlayers"), "': must be >= 1, got ", nlayers);
  VOLT_CHECK(dropout >= 0.0 && dropout < 1.0, ConfigError, "config key '", key("dropout"), "': must be in [0, 1), got ",
             dropout);
}

// ---- MultiheadAttention -------------------------------------------------------------------------

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout)
    : torch::nn::Module("MultiheadAttention"), embed_dim_(embed_dim), num_heads_(num_heads), dropout_(dropout) {
  in_proj_weight = register_parameter("in_proj_weight", torch::empty({3 * embed_dim, embed_dim}));
  in_proj_bias = register_parameter("in_proj_bias", torch::zeros({3 * embed_dim}));
  out_proj = register_module("out_proj", torch::nn::Linear(embed_dim, embed_dim));
  // PyTorch's MultiheadAttention._reset_parameters.
  torch::nn::init::xavier_uniform_(in_proj_weight);
  torch::nn::init::zeros_(out_proj->bias);
}

torch::Tensor MultiheadAttention::forward(const torch::Tensor& query, const torch::Tensor& key,
                                          const torch::Tensor& value, const torch::Tensor& attn_mask) {
  const int64_t E = embed_dim_, H = num_heads_, hd = E / H;
  torch::Tensor q, k, v;
  if (query.is_same(key) && key.is_same(value)) {  // self-attention: one packed projection
    auto qkv = torch::linear(query, in_proj_weight, in_proj_bias).chunk(3, -1);
    q = qkv[0], k = qkv[1], v = qkv[2];
  } else if (key.is_same(value)) {
    // Encoder-decoder attention, as PyTorch's _in_projection_packed: k and v from one projection,
    // so the memory is read, cast under autocast and kept for backward once instead of twice.
    auto w = in_proj_weight.split({E, 2 * E}), b = in_proj_bias.split({E, 2 * E});
    q = torch::linear(query, w[0], b[0]);
    auto kv = torch::linear(key, w[1], b[1]).chunk(2, -1);
    k = kv[0], v = kv[1];
  } else {
    auto w = in_proj_weight.split(E), b = in_proj_bias.split(E);
    q = torch::linear(query, w[0], b[0]);
    k = torch::linear(key, w[1], b[1]);
    v = torch::linear(value, w[2], b[2]);
  }
  const int64_t B = query.size(0), T = query.size(1), S = key.size(1);
  q = q.reshape({B, T, H, hd}).transpose(1, 2);  // [B, H, T, hd]
  k = k.reshape({B, S, H, hd}).transpose(1, 2);
  v = v.reshape({B, S, H, hd}).transpose(1, 2);
#if VOLT_HAVE_SDPA
  // On the GPU, PyTorch 2's fused attention (never materializes the [T, S] scores). The CPU keeps
  // the explicit path below, which the parity tests pin to Python PyTorch 1.13's values.
  if (q.is_cuda()) {
    auto o = compat::scaled_dot_product_attention(q, k, v, attn_mask, is_training() ? dropout_ : 0.0);
    return out_proj->forward(o.transpose(1, 2).reshape({B, T, E}));
  }
#endif
  // Scale q before the product, as PyTorch does.
  auto scores = torch::matmul(q / std::sqrt(static_cast<double>(hd)), k.transpose(-2, -1));  // [B, H, T, S]
  if (attn_mask.defined()) scores = scores + attn_mask;
  // Softmax in fp32 (a no-op in fp32 runs), then back to the values' dtype for the product.
  auto attn = torch::softmax(scores, -1, torch::kFloat).to(v.scalar_type());
  if (dropout_ > 0.0) attn = torch::dropout(attn, dropout_, is_training());
  auto out = torch::matmul(attn, v).transpose(1, 2).reshape({B, T, E});
  return out_proj->forward(out);
}

// ---- encoder and decoder layers -----------------------------------------------------------------

namespace {
torch::nn::LayerNorm layer_norm(int64_t d) { return torch::nn::LayerNorm(torch::nn::LayerNormOptions({d}).eps(1e-5)); }
}  // namespace

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead, int64_t dim_feedforward,
                                                 double dropout)
    : HookedModule("TransformerEncoderLayer"), dropout_(dropout) {
  self_attn = register_module("self_attn", std::make_shared<MultiheadAttention>(d_model, nhead, dropout));
  linear1 = register_module("linear1", torch::nn::Linear(d_model, dim_feedforward));
  linear2 = register_module("linear2", torch::nn::Linear(dim_feedforward, d_model));
  norm1 = register_module("norm1", layer_norm(d_model));
  norm2 = register_module("norm2", layer_norm(d_model));
}

torch::Tensor TransformerEncoderLayer::forward(const torch::Tensor& src, const torch::Tensor& src_mask) {
  return intercepted({src, src_mask}, [this](const TensorVec& in) { return body(in[0], in[1]); });
}

torch::Tensor TransformerEncoderLayer::body(const torch::Tensor& src, const torch::Tensor& src_mask) {
  const bool train = is_training();
  auto x = src;
  x = norm1->forward(x + torch::dropout(self_attn->forward(x, x, x, src_mask), dropout_, train));
  auto ff = linear2->forward(relu_dropout(linear1->forward(x), dropout_, train));
  return norm2->forward(x + torch::dropout(ff, dropout_, train));
}

TransformerDecoderLayer::TransformerDecoderLayer(int64_t d_model, int64_t nhead, int64_t dim_feedforward,
                                                 double dropout)
    : HookedModule("TransformerDecoderLayer"), dropout_(dropout) {
  self_attn = register_module("self_attn", std::make_shared<MultiheadAttention>(d_model, nhead, dropout));
  multihead_attn = register_module("multihead_attn", std::make_shared<MultiheadAttention>(d_model, nhead, dropout));
  linear1 = register_module("linear1", torch::nn::Linear(d_model, dim_feedforward));
  linear2 = register_module("linear2", torch::nn::Linear(dim_feedforward, d_model));
  norm1 = register_module("norm1", layer_norm(d_model));
  norm2 = register_module("norm2", layer_norm(d_model));
  norm3 = register_module("norm3", layer_norm(d_model));
}

torch::Tensor TransformerDecoderLayer::forward(const torch::Tensor& tgt, const torch::Tensor& memory,
                                               const torch::Tensor& tgt_mask) {
  return intercepted({tgt, memory, tgt_mask}, [this](const TensorVec& in) { return body(in[0], in[1], in[2]); });
}

torch::Tensor TransformerDecoderLayer::body(const torch::Tensor& tgt, const torch::Tensor& memory,
                                            const torch::Tensor& tgt_mask) {
  const bool train = is_training();
  auto x = tgt;
  x = norm1->forward(x + torch::dropout(self_attn->forward(x, x, x, tgt_mask), dropout_, train));
  x = norm2->forward(x + torch::dropout(multihead_attn->forward(x, memory, memory), dropout_, train));
  auto ff = linear2->forward(relu_dropout(linear1->forward(x), dropout_, train));
  return norm3->forward(x + torch::dropout(ff, dropout_, train));
}

// ---- encoder, decoder, nn.Transformer -----------------------------------------------------------

TransformerEncoder::TransformerEncoder(const TransformerOptions& o, std::optional<int64_t> nlayers)
    : torch::nn::Module("TransformerEncoder") {
  register_module("layers", torch::nn::ModuleList());
  norm = register_module("norm", layer_norm(o.ninp));
  for (int64_t i = 0; i < nlayers.value_or(o.nlayers); ++i)
    add_layer(std::make_shared<TransformerEncoderLayer>(o.ninp, o.nhead, o.nhid, o.dropout));
}

void TransformerEncoder::add_layer(std::shared_ptr<TransformerEncoderLayer> layer) {
  layers.push_back(layer);
  named_children()["layers"]->as<torch::nn::ModuleList>()->push_back(std::move(layer));
}

torch::Tensor TransformerEncoder::forward(const torch::Tensor& src, const torch::Tensor& mask) {
  auto x = src;
  for (auto& layer : layers) x = layer->forward(x, mask);
  return norm->forward(x);
}

TransformerDecoder::TransformerDecoder(const TransformerOptions& o, std::optional<int64_t> nlayers)
    : torch::nn::Module("TransformerDecoder") {
  register_module("layers", torch::nn::ModuleList());
  norm = register_module("norm", layer_norm(o.ninp));
  for (int64_t i = 0; i < nlayers.value_or(o.nlayers); ++i)
    add_layer(std::make_shared<TransformerDecoderLayer>(o.ninp, o.nhead, o.nhid, o.dropout));
}

void TransformerDecoder::add_layer(std::shared_ptr<TransformerDecoderLayer> layer) {
  layers.push_back(layer);
  named_children()["layers"]->as<torch::nn::ModuleList>()->push_back(std::move(layer));
}

torch::Tensor TransformerDecoder::forward(const torch::Tensor& tgt, const torch::Tensor& memory,
                                          const torch::Tensor& tgt_mask) {
  auto x = tgt;
  for (auto& layer : layers) x = layer->forward(x, memory, tgt_mask);
  return norm->forward(x);
}

EncoderDecoder::EncoderDecoder(const TransformerOptions& o, const UnitBuilt& built) : torch::nn::Module("Transformer") {
  if (built) {
    build_layer_by_layer(o, built);
    return;
  }
  encoder = register_module("encoder", std::make_shared<TransformerEncoder>(o));
  decoder = register_module("decoder", std::make_shared<TransformerDecoder>(o));
  // nn.Transformer._reset_parameters.
  for (auto& p : parameters())
    if (p.dim() > 1) torch::nn::init::xavier_uniform_(p);
}

namespace {
torch::Tensor rng_state(at::Generator& gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}
void set_rng_state(at::Generator& gen, const torch::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}
}  // namespace

// [Note: the same values, one layer at a time]
// Built whole, the random stream goes: every layer's default initialisation (encoder layers, then
// decoder layers), then xavier_uniform_ over every matrix in parameter order, which overwrites the
// defaults. Layer by layer, the stream must go the same way or the values would differ from a
// single process's. Pass 1 builds each layer and drops it at once, only to record where in the
// stream each layer's default initialisation starts and where the xavier pass starts. Pass 2 builds
// layer i from its recorded start, then draws its xavier values from where the previous layer's
// ended, and hands it over (FSDP shards it) before the next is built. Each layer is built twice;
// at most one whole layer exists at a time.
void EncoderDecoder::build_layer_by_layer(const TransformerOptions& o, const UnitBuilt& built) {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  auto make_encoder_layer = [&] {
    return std::make_shared<TransformerEncoderLayer>(o.ninp, o.nhead, o.nhid, o.dropout);
  };
  auto make_decoder_layer = [&] {
    return std::make_shared<TransformerDecoderLayer>(o.ninp, o.nhead, o.nhid, o.dropout);
  };
  std::vector<torch::Tensor> starts;
  for (int64_t i = 0; i < 2 * o.nlayers; ++i) {
    starts.push_back(rng_state(gen));
    if (i < o.nlayers)
      make_encoder_layer();
    else
      make_decoder_layer();
  }
  torch::Tensor xavier = rng_state(gen);
  encoder = register_module("encoder", std::make_shared<TransformerEncoder>(o, 0));
  decoder = register_module("decoder", std::make_shared<TransformerDecoder>(o, 0));
  auto finish = [&](torch::nn::Module& layer) {
    set_rng_state(gen, xavier);
    for (auto& p : layer.parameters())
      if (p.dim() > 1) torch::nn::init::xavier_uniform_(p);
    xavier = rng_state(gen);
    built(layer);
  };
  for (int64_t i = 0; i < 2 * o.nlayers; ++i) {
    set_rng_state(gen, starts[i]);
    if (i < o.nlayers) {
      auto layer = make_encoder_layer();
      finish(*layer);
      encoder->add_layer(layer);
    } else {
      auto layer = make_decoder_layer();
      finish(*layer);
      decoder->add_layer(layer);
    }
  }
  set_rng_state(gen, xavier);  // where the whole build leaves the stream
}

torch::Tensor EncoderDecoder::forward(const torch::Tensor& src, const torch::Tensor& tgt,
                                      const torch::Tensor& tgt_mask) {
  // nn.Transformer passes no src_mask (its layers add an all-zero mask: nothing).
  auto src_mask = torch::Tensor();  // all zeros: adding it changes nothing, so none at all
  auto memory = encoder->forward(src, src_mask);
  return decoder->forward(tgt, memory, tgt_mask);
}

// ---- positional encoding and the model ----------------------------------------------------------

PositionalEncoding::PositionalEncoding(int64_t dim, double dropout, int64_t max_len)
    : torch::nn::Module("PositionalEncoding"), dim_(dim), max_len_(max_len), dropout_(dropout) {}

torch::Tensor PositionalEncoding::forward(const torch::Tensor& x) {
  const int64_t t = x.size(1);
  VOLT_CHECK(t <= max_len_, ConfigError, "PositionalEncoding: sequence length ", t, " exceeds max_len ", max_len_);
  if (!pe_.defined() || pe_.device() != x.device()) {
    torch::NoGradGuard no_grad;
    auto f = torch::TensorOptions().dtype(torch::kFloat).device(x.device());
    auto pe = torch::zeros({max_len_, dim_}, f);
    auto position = torch::arange(0, max_len_, f).unsqueeze(1);
    auto div_term = torch::exp(torch::arange(0, dim_, 2, f) * (-std::log(10000.0) / static_cast<double>(dim_)));
    pe.slice(1, 0, dim_, 2).copy_(torch::sin(position * div_term));
    pe.slice(1, 1, dim_, 2).copy_(torch::cos(position * div_term));
    pe_ = pe.unsqueeze(0);
  }
  auto y = x + pe_.slice(1, 0, t).to(x.scalar_type());
  return torch::dropout(y, dropout_, is_training());
}

Transformer::Transformer(TransformerOptions options, const UnitBuilt& built)
    : torch::nn::Module("Transformer"), options_(options) {
  options_.validate();
  auto unit = [&](auto m) {
    if (built) built(*m);
    return m;
  };
  pos_encoder = register_module("pos_encoder", std::make_shared<PositionalEncoding>(options_.ninp, options_.dropout));
  embedding = register_module("embedding", unit(hooked(torch::nn::Embedding(options_.vocab_size, options_.ninp))));
  transformer = register_module("transformer", std::make_shared<EncoderDecoder>(options_, built));
  decoder = register_module("decoder", unit(hooked(torch::nn::Linear(options_.ninp, options_.vocab_size))));
}

torch::Tensor Transformer::generate_square_subsequent_mask(int64_t t, torch::Device device) {
  return torch::triu(torch::full({t, t}, -std::numeric_limits<float>::infinity(),
                                 torch::TensorOptions().dtype(torch::kFloat).device(device)),
                     1);
}

torch::Tensor Transformer::forward(const torch::Tensor& inputs, const torch::Tensor& target, torch::Tensor mask) {
  const int64_t t = inputs.size(1);
  if (!mask.defined()) mask = generate_square_subsequent_mask(t, inputs.device());
  const double scale = std::sqrt(static_cast<double>(options_.ninp));
  auto src = pos_encoder->forward(embedding->forward(inputs) * scale);
  auto tgt = pos_encoder->forward(embedding->forward(target) * scale);
  auto output = transformer->forward(src, tgt, mask);
  output = decoder->forward(output);
  output = torch::log_softmax(output, -1);
  return output.reshape({-1, options_.vocab_size});
}

std::vector<std::shared_ptr<HookedModule>> Transformer::layers() const {
  std::vector<std::shared_ptr<HookedModule>> out;
  for (auto& l : transformer->encoder->layers) out.push_back(l);
  for (auto& l : transformer->decoder->layers) out.push_back(l);
  return out;
}

}  // namespace volt::demos
