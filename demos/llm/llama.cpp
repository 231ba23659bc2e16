#include "volt/demos/llm/llama.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "volt/core/compat.h"
#include "volt/core/errors.h"
#include "volt/demos/llm/rotary.h"
#include "volt/demos/llm/swiglu.h"
#include "volt/profiler/model_flops.h"

namespace volt::demos {

namespace {

std::string key_of(const std::string& prefix, const char* field) {
  return prefix.empty() ? std::string(field) : prefix + "." + field;
}

/// [B, KV, S, hd] -> [B, KV * n_rep, S, hd]: query head j reads kv head j / n_rep.
torch::Tensor repeat_kv(const torch::Tensor& x, int64_t n_rep) {
  if (n_rep == 1) return x;
  const auto s = x.sizes();
  return x.unsqueeze(2).expand({s[0], s[1], n_rep, s[2], s[3]}).reshape({s[0], s[1] * n_rep, s[2], s[3]});
}

/// softmax(q k^T * scale + mask) v with the softmax in float32: the exact path (CPU, and a KV cache
/// continued by several tokens). Query i sees keys 0 .. past + i.
torch::Tensor exact_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     int64_t past, double dropout_p, bool training) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  auto scores = torch::matmul(q, k.transpose(-2, -1)) * scale;
  const int64_t t = q.size(-2), s = k.size(-2);
  if (t > 1 || past == 0) {
    auto mask = torch::full({t, s}, -std::numeric_limits<float>::infinity(), q.options())
                    .triu(past + 1);  // zero on and below the (shifted) diagonal
    scores = scores + mask;
  }
  auto probs = torch::softmax(scores, -1, torch::kFloat).to(q.scalar_type());
  if (dropout_p > 0.0 && training) probs = torch::dropout(probs, dropout_p, true);
  return torch::matmul(probs, v);
}

torch::nn::Linear linear(int64_t in, int64_t out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
}

}  // namespace

void LlamaOptions::validate(const std::string& prefix) const {
  auto positive = [&](int64_t v, const char* field) {
    VOLT_CHECK(v > 0, ConfigError, "config key '", key_of(prefix, field), "': must be > 0, got ", v);
  };
  VOLT_CHECK(vocab_size > 0, ConfigError, "config key '", key_of(prefix, "vocab_size"),
             "': must be > 0 (0 stands for the tokenizer's vocabulary only where a data module links it), got ",
             vocab_size);
  positive(hidden_size, "hidden_size");
  positive(num_hidden_layers, "num_hidden_layers");
  positive(num_attention_heads, "num_attention_heads");
  positive(max_position_embeddings, "max_position_embeddings");
  VOLT_CHECK(intermediate_size >= 0, ConfigError, "config key '", key_of(prefix, "intermediate_size"),
             "': must be >= 0 (0: Llama's 8/3 rule), got ", intermediate_size);
  VOLT_CHECK(num_key_value_heads >= 0, ConfigError, "config key '", key_of(prefix, "num_key_value_heads"),
             "': must be >= 0 (0: as many as num_attention_heads), got ", num_key_value_heads);
  VOLT_CHECK(hidden_size % num_attention_heads == 0, ConfigError, "config key '", key_of(prefix, "hidden_size"),
             "': ", hidden_size, " is not divisible by num_attention_heads (", num_attention_heads, ")");
  VOLT_CHECK(head_dim() % 2 == 0, ConfigError, "config key '", key_of(prefix, "num_attention_heads"),
             "': the head width hidden_size / num_attention_heads = ", head_dim(),
             " must be even for rotary embeddings");
  VOLT_CHECK(num_attention_heads % kv_heads() == 0, ConfigError, "config key '", key_of(prefix, "num_key_value_heads"),
             "': ", kv_heads(), " does not divide num_attention_heads (", num_attention_heads, ")");
  VOLT_CHECK(rope_theta > 1.0 && std::isfinite(rope_theta), ConfigError, "config key '", key_of(prefix, "rope_theta"),
             "': must be a finite number > 1, got ", rope_theta);
  VOLT_CHECK(rms_norm_eps > 0.0 && rms_norm_eps < 1.0, ConfigError, "config key '", key_of(prefix, "rms_norm_eps"),
             "': must be in (0, 1), got ", rms_norm_eps);
  VOLT_CHECK(initializer_range > 0.0 && std::isfinite(initializer_range), ConfigError, "config key '",
             key_of(prefix, "initializer_range"), "': must be a finite number > 0, got ", initializer_range);
  VOLT_CHECK(attention_dropout >= 0.0 && attention_dropout < 1.0, ConfigError, "config key '",
             key_of(prefix, "attention_dropout"), "': must be in [0, 1), got ", attention_dropout);
  // A model whose parameters cannot be counted in int64 (or indexed by one tensor) is a typo.
  const double layers = static_cast<double>(num_hidden_layers) *
                        (4.0 * hidden_size * hidden_size + 3.0 * hidden_size * std::max<int64_t>(ffn_size(), 1));
  const double embeddings = 2.0 * vocab_size * hidden_size;
  VOLT_CHECK(layers + embeddings < 1e13, ConfigError, "config key '",
             key_of(prefix, embeddings > layers ? "vocab_size" : "hidden_size"), "': this shape has ~",
             layers + embeddings, " parameters (more than 10^13); check hidden_size, num_hidden_layers and vocab_size");
}

int64_t LlamaOptions::ffn_size() const {
  if (intermediate_size > 0) return intermediate_size;
  const int64_t raw = 8 * hidden_size / 3;
  return 256 * ((raw + 255) / 256);
}

int64_t LlamaOptions::num_parameters() const {
  const int64_t d = hidden_size, hd = head_dim();
  const int64_t attn = d * num_attention_heads * hd * 2 + d * kv_heads() * hd * 2;
  const int64_t layer = attn + 3 * d * ffn_size() + 2 * d;
  return num_hidden_layers * layer + d + vocab_size * d * (tie_word_embeddings ? 1 : 2);
}

double LlamaOptions::flops_per_token(int64_t seq_len) const {
  // The input embedding is a lookup; a tied one is also lm_head's matmul, so it counts then.
  const int64_t n = num_parameters() - (tie_word_embeddings ? 0 : vocab_size * hidden_size);
  return volt::flops_per_token(n, num_hidden_layers, num_attention_heads, head_dim(), seq_len);
}

RMSNorm::RMSNorm(int64_t dim, double eps) : eps_(eps) { weight = register_parameter("weight", torch::ones({dim})); }

torch::Tensor RMSNorm::forward(const torch::Tensor& x) {
  // On the GPU one fused kernel instead of about eight elementwise ones each way (a profile of the
  // 1 B model on an H200 spent about 40% of a step in elementwise kernels). The CPU keeps the
  // formula below, whose values the parity tests pin to the Python reference.
  if (compat::kRmsNormOp && x.is_cuda() && weight.scalar_type() == x.scalar_type())
    return compat::rms_norm(x, weight, eps_);
  const auto xf = x.to(torch::kFloat);
  const auto normed = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  return weight * normed.to(x.scalar_type());
}

LlamaAttention::LlamaAttention(const LlamaOptions& o)
    : heads_(o.num_attention_heads), kv_heads_(o.kv_heads()), head_dim_(o.head_dim()), dropout_(o.attention_dropout) {
  const int64_t d = o.hidden_size;
  q_proj = register_module("q_proj", linear(d, heads_ * head_dim_));
  k_proj = register_module("k_proj", linear(d, kv_heads_ * head_dim_));
  v_proj = register_module("v_proj", linear(d, kv_heads_ * head_dim_));
  o_proj = register_module("o_proj", linear(heads_ * head_dim_, d));
}

torch::Tensor LlamaAttention::forward(const torch::Tensor& x, const torch::Tensor& rope, KVCache* cache,
                                      int64_t layer) {
  const int64_t b = x.size(0), t = x.size(1);
  // Rotary on [B, T, H, hd], as the projections lay it out (dense), then heads before positions.
  const auto q_raw = q_proj(x).view({b, t, heads_, head_dim_});
  if (kernels_ == JitKernels::Unchecked && x.is_cuda())
    kernels_ = rotary_kernel_works(q_raw, rope) ? JitKernels::Fused : JitKernels::Aten;
  const bool fused = kernels_ == JitKernels::Fused;
  auto q = apply_rotary(q_raw, rope, fused).transpose(1, 2);
  auto k = apply_rotary(k_proj(x).view({b, t, kv_heads_, head_dim_}), rope, fused).transpose(1, 2);
  auto v = v_proj(x).view({b, t, kv_heads_, head_dim_}).transpose(1, 2);
  int64_t past = 0;
  if (cache != nullptr) {
    past = cache->length;
    cache->k[layer].narrow(2, past, t).copy_(k);
    cache->v[layer].narrow(2, past, t).copy_(v);
    k = cache->k[layer].narrow(2, 0, past + t);
    v = cache->v[layer].narrow(2, 0, past + t);
  }
  const int64_t n_rep = heads_ / kv_heads_;
  const double p = is_training() ? dropout_ : 0.0;
  torch::Tensor out;
#if VOLT_HAVE_SDPA
  // Flash kernels take the causal mask as a flag: exact only when queries and keys start together.
  // Where they take grouped heads, k and v are not repeated (compat::causal_attention): at 8 x 2048
  // tokens, 16 query heads and 8 kv heads of 128, 67 MB a layer less kept for backward and about
  // 0.4 GB of copies a layer less.
  if (x.is_cuda() && past == 0)
    out = compat::causal_attention(q, k, v, p);
  else
#endif
    out = exact_causal_attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), past, p, is_training());
  return o_proj(out.transpose(1, 2).reshape({b, t, heads_ * head_dim_}));
}

LlamaMLP::LlamaMLP(int64_t dim, int64_t hidden) {
  gate_proj = register_module("gate_proj", linear(dim, hidden));
  up_proj = register_module("up_proj", linear(dim, hidden));
  down_proj = register_module("down_proj", linear(hidden, dim));
}

torch::Tensor LlamaMLP::forward(const torch::Tensor& x) {
  const auto gate = gate_proj(x), up = up_proj(x);
  if (kernels_ == JitKernels::Unchecked && gate.is_cuda())
    kernels_ = swiglu_kernels_work(gate, up) ? JitKernels::Fused : JitKernels::Aten;
  return down_proj(swiglu(gate, up, kernels_ == JitKernels::Fused));
}

LlamaDecoderLayer::LlamaDecoderLayer(const LlamaOptions& o) {
  self_attn = register_module("self_attn", std::make_shared<LlamaAttention>(o));
  mlp = register_module("mlp", std::make_shared<LlamaMLP>(o.hidden_size, o.ffn_size()));
  input_layernorm = register_module("input_layernorm", std::make_shared<RMSNorm>(o.hidden_size, o.rms_norm_eps));
  post_attention_layernorm =
      register_module("post_attention_layernorm", std::make_shared<RMSNorm>(o.hidden_size, o.rms_norm_eps));
}

torch::Tensor LlamaDecoderLayer::body(const torch::Tensor& h, const torch::Tensor& rope, KVCache* cache,
                                      int64_t layer) {
  auto x = h + self_attn->forward(input_layernorm->forward(h), rope, cache, layer);
  return x + mlp->forward(post_attention_layernorm->forward(x));
}

torch::Tensor LlamaDecoderLayer::forward(const torch::Tensor& h, const torch::Tensor& rope) {
  return intercepted({h, rope}, [this](const TensorVec& in) { return body(in[0], in[1], nullptr, 0); });
}

torch::Tensor LlamaDecoderLayer::forward_cached(const torch::Tensor& h, const torch::Tensor& rope, KVCache& cache,
                                                int64_t layer) {
  return body(h, rope, &cache, layer);
}

LlamaModel::LlamaModel(const LlamaOptions& o, const LayerBuilt& built) : options_(o) {
  options_.validate();
  torch::NoGradGuard ng;
  const double std = o.initializer_range;
  embed_tokens = register_module("embed_tokens", hooked(torch::nn::Embedding(o.vocab_size, o.hidden_size)));
  embedding_weight_ = embed_tokens->inner()->weight;
  embedding_weight_.normal_(0.0, std);
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < o.num_hidden_layers; ++i) {
    auto layer = std::make_shared<LlamaDecoderLayer>(o);
    for (auto& p : layer->named_parameters())
      if (p.value().dim() == 2) p.value().normal_(0.0, std);
    layers->push_back(layer);
    if (built) built(*layer);
  }
  norm = register_module("norm", std::make_shared<RMSNorm>(o.hidden_size, o.rms_norm_eps));
}

torch::Tensor LlamaModel::forward(const torch::Tensor& input_ids, KVCache* cache) {
  VOLT_CHECK(input_ids.dim() == 2 && input_ids.scalar_type() == torch::kLong, DataError,
             "Llama: input_ids must be an int64 tensor [batch, tokens], got ", input_ids.sizes(), " ",
             input_ids.scalar_type());
  const int64_t t = input_ids.size(1), start = cache ? cache->length : 0;
  VOLT_CHECK(start + t <= options_.max_position_embeddings, DataError, "Llama: ", start + t,
             " positions exceed max_position_embeddings (", options_.max_position_embeddings,
             "); raise model.max_position_embeddings or shorten data.block_size");
  VOLT_CHECK(cache == nullptr || start + t <= cache->capacity, DataError, "Llama: the KV cache holds ",
             cache ? cache->capacity : 0, " positions, ", start + t, " are needed");
  auto h = embed_tokens->forward(input_ids);
  const auto rope = rotary_table(start, t, options_.head_dim(), options_.rope_theta, h.device(), h.scalar_type());
  for (size_t i = 0; i < layers->size(); ++i) {
    auto& layer = *layers->ptr<LlamaDecoderLayer>(i);
    h = cache ? layer.forward_cached(h, rope, *cache, static_cast<int64_t>(i)) : layer.forward(h, rope);
  }
  if (cache) cache->length += t;
  return norm->forward(h);
}

KVCache LlamaModel::make_cache(int64_t batch, int64_t capacity) const {
  KVCache c;
  c.capacity = std::min(capacity, options_.max_position_embeddings);
  const auto opts = embedding_weight().options();
  for (int64_t i = 0; i < options_.num_hidden_layers; ++i) {
    c.k.push_back(torch::zeros({batch, options_.kv_heads(), c.capacity, options_.head_dim()}, opts));
    c.v.push_back(torch::zeros({batch, options_.kv_heads(), c.capacity, options_.head_dim()}, opts));
  }
  return c;
}

}  // namespace volt::demos
