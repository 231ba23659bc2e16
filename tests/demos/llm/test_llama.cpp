// The Llama decoder and its LightningModule: Hugging Face's names and shapes, parameter count,
// causality, the KV cache against a full forward, tied embeddings, the optimizer's param groups and
// schedule, option errors, and a short fit that learns.
#include <torch/cuda.h>
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <set>

#include "gpu_visibility.h"
#include "volt/checkpoint/checkpoint_reader.h"
#include "volt/checkpoint/weights.h"
#include "volt/core/compat.h"
#include "volt/core/errors.h"
#include "volt/core/options.h"
#include "volt/data/data_loader.h"
#include "volt/demos/llm/llama_lm.h"
#include "volt/module/lr_scheduler.h"
#include "volt/trainer/trainer.h"

using volt::demos::LlamaLM;
using volt::demos::LlamaLMOptions;

namespace {
LlamaLMOptions tiny(bool tied = false) {
  LlamaLMOptions o;
  o.vocab_size = 61;
  o.hidden_size = 32;
  o.num_hidden_layers = 2;
  o.num_attention_heads = 4;
  o.num_key_value_heads = 2;
  o.intermediate_size = 48;
  o.max_position_embeddings = 64;
  o.tie_word_embeddings = tied;
  return o;
}

std::shared_ptr<LlamaLM> built(const LlamaLMOptions& o, uint64_t seed = 1) {
  torch::manual_seed(seed);
  auto m = std::make_shared<LlamaLM>(o);
  m->configure_model();
  return m;
}

std::string config_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const volt::ConfigError& e) {
    return e.what();
  }
  return "";
}

/// Every sample is one sequence of a 5-token cycle from a random phase: a model that learns the
/// cycle predicts every token after the first.
class CycleData : public volt::Dataset {
 public:
  CycleData(int64_t n, int64_t t) : n_(n), t_(t) {}
  int64_t size() const override { return n_; }
  volt::Batch get(int64_t i) const override {
    auto w = (torch::arange(t_ + 1) + i * 7) % 5 + 3;
    return volt::Batch{}.set("input_ids", w.narrow(0, 0, t_)).set("labels", w.narrow(0, 1, t_));
  }

 private:
  int64_t n_, t_;
};
/// A quiet Trainer of `steps` steps with the recipe's clipping.
volt::TrainerOptions cycle_trainer(int64_t steps) {
  volt::TrainerOptions t;
  t.max_steps = steps;
  t.enable_checkpointing = false;
  t.logger = false;
  t.enable_progress_bar = false;
  t.gradient_clip_val = 1.0;
  return t;
}

std::shared_ptr<volt::DataLoader> cycle_loader(bool shuffle) {
  volt::DataLoaderOptions lo;
  lo.batch_size = 8;
  lo.shuffle = shuffle;
  return std::make_shared<volt::DataLoader>(std::make_shared<CycleData>(64, 16), lo);
}
}  // namespace

TEST_CASE("Llama: Hugging Face's names and shapes, and the count matches num_parameters()", "[llm][model]") {
  const auto o = tiny();
  auto m = built(o);
  const auto params = m->named_parameters();
  const int64_t hd = o.head_dim();
  std::map<std::string, std::vector<int64_t>> want = {
      {"model.embed_tokens.weight", {61, 32}},
      {"model.layers.1.self_attn.q_proj.weight", {4 * hd, 32}},
      {"model.layers.1.self_attn.k_proj.weight", {2 * hd, 32}},
      {"model.layers.1.self_attn.v_proj.weight", {2 * hd, 32}},
      {"model.layers.1.self_attn.o_proj.weight", {32, 4 * hd}},
      {"model.layers.0.mlp.gate_proj.weight", {48, 32}},
      {"model.layers.0.mlp.up_proj.weight", {48, 32}},
      {"model.layers.0.mlp.down_proj.weight", {32, 48}},
      {"model.layers.0.input_layernorm.weight", {32}},
      {"model.layers.0.post_attention_layernorm.weight", {32}},
      {"model.norm.weight", {32}},
      {"lm_head.weight", {61, 32}},
  };
  for (const auto& [name, shape] : want) {
    INFO(name);
    REQUIRE(params.contains(name));
    CHECK(params[name].sizes().vec() == shape);
  }
  int64_t total = 0;
  for (const auto& kv : params) total += kv.value().numel();
  CHECK(total == o.num_parameters());
  CHECK(params.size() == 2 * 9 + 3);  // no biases anywhere
  CHECK(params["model.layers.0.input_layernorm.weight"].eq(1).all().item<bool>());
  const double std = params["model.layers.0.mlp.gate_proj.weight"].std().item<double>();
  CHECK(std == Approx(0.02).epsilon(0.2));
  // Llama's 8/3 rule, rounded up to a multiple of 256.
  LlamaLMOptions d;
  d.hidden_size = 4096;
  CHECK(d.ffn_size() == 11008);
}

TEST_CASE("Llama: tied embeddings share one tensor and are counted once", "[llm][model]") {
  const auto o = tiny(true);
  auto m = built(o);
  auto params = m->named_parameters();
  CHECK(params["lm_head.weight"].unsafeGetTensorImpl() == params["model.embed_tokens.weight"].unsafeGetTensorImpl());
  std::set<c10::TensorImpl*> unique;
  int64_t total = 0;
  for (const auto& kv : params)
    if (unique.insert(kv.value().unsafeGetTensorImpl()).second) total += kv.value().numel();
  CHECK(total == o.num_parameters());
  // One optimizer entry per tensor: the tie is not stepped twice.
  auto opt = m->configure_optimizers();
  size_t listed = 0;
  for (auto& g : opt[0].optimizer->param_groups()) listed += g.params().size();
  CHECK(listed == unique.size());
}

TEST_CASE("Llama: attention is causal and the KV cache gives the full forward's logits", "[llm][model]") {
  auto m = built(tiny());
  m->eval();
  torch::NoGradGuard ng;
  auto ids = torch::randint(0, 61, {2, 12}, torch::kLong);
  auto full = m->forward(ids);
  auto changed = ids.clone();
  changed.index_put_({torch::indexing::Slice(), 8}, (ids.select(1, 8) + 1) % 61);
  auto after = m->forward(changed);
  CHECK(torch::allclose(full.narrow(1, 0, 8), after.narrow(1, 0, 8), 0, 0));
  CHECK_FALSE(torch::allclose(full.narrow(1, 8, 4), after.narrow(1, 8, 4)));

  auto cache = m->model().make_cache(2, 12);
  auto first = m->forward(ids.narrow(1, 0, 5));  // a prefill of 5, then 3 and 4 more tokens
  std::vector<torch::Tensor> parts;
  parts.push_back(torch::nn::functional::linear(m->model().forward(ids.narrow(1, 0, 5), &cache),
                                                m->named_parameters()["lm_head.weight"]));
  parts.push_back(torch::nn::functional::linear(m->model().forward(ids.narrow(1, 5, 3), &cache),
                                                m->named_parameters()["lm_head.weight"]));
  parts.push_back(torch::nn::functional::linear(m->model().forward(ids.narrow(1, 8, 4), &cache),
                                                m->named_parameters()["lm_head.weight"]));
  CHECK(cache.length == 12);
  CHECK(torch::allclose(torch::cat(parts, 1), full, 1e-5, 1e-5));
  CHECK(torch::allclose(first, full.narrow(1, 0, 5), 1e-5, 1e-5));
}

TEST_CASE("Llama: grouped-query attention equals full attention with repeated kv weights", "[llm][model]") {
  auto grouped = built(tiny());
  auto o = tiny();
  o.num_key_value_heads = 4;
  auto full = built(o);
  torch::NoGradGuard ng;
  auto g = grouped->named_parameters();
  for (auto& kv : full->named_parameters()) {
    const auto& name = kv.key();
    auto src = g[name];
    if (name.find("k_proj") != std::string::npos || name.find("v_proj") != std::string::npos) {
      // kv head j serves query heads 2j and 2j+1: repeat each head's rows twice.
      const int64_t hd = o.head_dim();
      src = src.view({2, 1, hd, 32}).expand({2, 2, hd, 32}).reshape({4 * hd, 32});
    }
    kv.value().copy_(src);
  }
  auto ids = torch::randint(0, 61, {2, 9}, torch::kLong);
  CHECK(torch::allclose(grouped->forward(ids), full->forward(ids), 1e-5, 1e-5));
}

TEST_CASE("Llama: param groups decay Linear weights only, and the schedule warms up then decays", "[llm][optim]") {
  auto o = tiny();
  o.weight_decay = 0.1;
  o.warmup_steps = 4;
  o.lr_decay_steps = 14;
  o.min_lr_ratio = 0.1;
  auto m = built(o);
  auto opts = m->configure_optimizers();
  auto& groups = opts[0].optimizer->param_groups();
  REQUIRE(groups.size() == 2);
  auto wd = [](torch::optim::OptimizerParamGroup& g) {
    return static_cast<torch::optim::AdamWOptions&>(g.options()).weight_decay();
  };
  CHECK(wd(groups[0]) == 0.1);
  CHECK(wd(groups[1]) == 0.0);
  CHECK(groups[0].params().size() == 2 * 7 + 1);  // 7 Linear weights a layer, and lm_head
  CHECK(groups[1].params().size() == 2 * 2 + 2);  // 2 norms a layer, the final norm, the embedding
  for (auto& p : groups[1].params()) CHECK((p.dim() == 1 || p.size(0) == 61));

  using volt::demos::warmup_cosine;
  CHECK(warmup_cosine(0, 4, 14, 0.1) == Approx(0.2));
  CHECK(warmup_cosine(3, 4, 14, 0.1) == Approx(0.8));
  CHECK(warmup_cosine(4, 4, 14, 0.1) == Approx(1.0));
  CHECK(warmup_cosine(9, 4, 14, 0.1) == Approx(0.55));
  CHECK(warmup_cosine(14, 4, 14, 0.1) == Approx(0.1));
  CHECK(warmup_cosine(40, 4, 14, 0.1) == Approx(0.1));
  CHECK(warmup_cosine(40, 4, 0, 0.1) == Approx(1.0));
  REQUIRE(opts[0].lr_scheduler);
  CHECK(opts[0].interval.value() == volt::SchedulerInterval::Step);
  const double lr0 = static_cast<torch::optim::AdamWOptions&>(groups[0].options()).lr();
  CHECK(lr0 == Approx(o.lr * 0.2));
}

TEST_CASE("Llama: impossible shapes name their config key", "[llm][model][config]") {
  auto bad = [](auto edit) {
    auto o = tiny();
    edit(o);
    return config_error([&] { o.validate(); });
  };
  CHECK_THAT(bad([](LlamaLMOptions& o) { o.num_attention_heads = 5; }), Catch::Contains("model.hidden_size"));
  CHECK_THAT(bad([](LlamaLMOptions& o) { o.num_key_value_heads = 3; }), Catch::Contains("model.num_key_value_heads"));
  CHECK_THAT(bad([](LlamaLMOptions& o) { o.vocab_size = 0; }), Catch::Contains("model.vocab_size"));
  CHECK_THAT(bad([](LlamaLMOptions& o) { o.beta2 = 1.0; }), Catch::Contains("model.beta2"));
  // A decay that would end before warm-up does: the lr would stay at its peak, min_lr_ratio unused.
  for (int64_t decay : {2, 4})
    CHECK_THAT(bad([&](LlamaLMOptions& o) {
                 o.warmup_steps = 4;
                 o.lr_decay_steps = decay;
               }),
               Catch::Contains("model.lr_decay_steps") && Catch::Contains("never start"));
  CHECK(bad([](LlamaLMOptions& o) {
          o.warmup_steps = 4;
          o.lr_decay_steps = 5;
        }).empty());
  CHECK_THAT(bad([](LlamaLMOptions& o) { o.hidden_size = 1 << 21; }),
             Catch::Contains("10^13") && Catch::Contains("model.hidden_size"));
  // An absurd vocabulary is named as such, not as a width.
  CHECK_THAT(bad([](LlamaLMOptions& o) { o.vocab_size = int64_t{1} << 40; }),
             Catch::Contains("10^13") && Catch::Contains("model.vocab_size"));
  CHECK_THAT(bad([](LlamaLMOptions& o) {
               o.hidden_size = 36;
               o.num_attention_heads = 4;
             }),
             Catch::Contains("even"));
  CHECK_THROWS_WITH(volt::options_from_yaml<LlamaLMOptions>(YAML::Load("{hidden: 3}"), "model"),
                    Catch::Contains("model.hidden"));
  auto m = built(tiny());
  CHECK_THROWS_AS(m->forward(torch::zeros({1, 65}, torch::kLong)), volt::DataError);
  CHECK_THAT(config_error([&] { m->generate(torch::zeros({60}, torch::kLong), 10); }),
             Catch::Contains("max_position_embeddings"));
}

TEST_CASE("Llama: generation is greedy at temperature 0 and seeded otherwise", "[llm][generate]") {
  auto m = built(tiny());
  auto prompt = torch::tensor({3, 4, 5}, torch::kLong);
  auto a = m->generate(prompt, 10, 0.0);
  CHECK(a.numel() == 10);
  // Greedy equals the argmax of a full forward, token by token.
  auto seq = prompt.clone();
  for (int64_t i = 0; i < 10; ++i) {
    torch::NoGradGuard ng;
    m->eval();
    auto next = m->forward(seq.unsqueeze(0)).select(1, -1).argmax(-1).item<int64_t>();
    CHECK(next == a[i].item<int64_t>());
    seq = torch::cat({seq, torch::tensor({next}, torch::kLong)});
  }
  auto g1 = at::detail::createCPUGenerator(7), g2 = at::detail::createCPUGenerator(7);
  CHECK(torch::equal(m->generate(prompt, 12, 1.0, 5, -1, g1), m->generate(prompt, 12, 1.0, 5, -1, g2)));
  // stop_id ends early, and the stop token is returned.
  const int64_t stop = a[2].item<int64_t>();
  auto s = m->generate(prompt, 10, 0.0, 0, stop);
  CHECK(s[s.numel() - 1].item<int64_t>() == stop);
  CHECK(s.numel() <= 3);
  // A temperature too small to divide by (the logits / 1e-39 overflow float32) is greedy.
  CHECK(torch::equal(m->generate(prompt, 10, 1e-39, 0, -1, g1), a));
  CHECK(torch::equal(m->generate(prompt, 10, 1e-300, 5, -1, g1), a));
}

TEST_CASE("Llama: generation draws only ids below vocab_limit (a vocabulary padded past the tokenizer's)",
          "[llm][generate]") {
  auto m = built(tiny());  // 61 ids
  const auto prompt = torch::tensor({3, 4, 5}, torch::kLong);
  // Greedy without a limit reaches its largest id; below a limit of that id it never does.
  const auto greedy = m->generate(prompt, 30, 0.0);
  const int64_t limit = greedy.max().item<int64_t>();
  REQUIRE(limit >= 2);
  const auto limited = m->generate(prompt, 30, 0.0, 0, -1, std::nullopt, limit);
  CHECK(limited.max().item<int64_t>() < limit);
  auto g = at::detail::createCPUGenerator(3);
  for (const int64_t k : {0, 1, 20}) {
    const auto sampled = m->generate(prompt, 40, 2.0, k, -1, g, limit);
    CHECK(sampled.numel() == 40);
    CHECK(sampled.max().item<int64_t>() < limit);
    CHECK(sampled.min().item<int64_t>() >= 0);
  }
  // The limit equal to the vocabulary is no limit; beyond it, or negative, refused.
  CHECK(torch::equal(m->generate(prompt, 30, 0.0, 0, -1, std::nullopt, 61), greedy));
  CHECK_THAT(config_error([&] { m->generate(prompt, 3, 0.0, 0, -1, std::nullopt, 62); }),
             Catch::Contains("vocab_limit"));
  CHECK_THAT(config_error([&] { m->generate(prompt, 3, 0.0, 0, -1, std::nullopt, -1); }),
             Catch::Contains("vocab_limit"));
}

TEST_CASE("Llama: a short fit through the Trainer learns a cycle", "[llm][fit]") {
  auto o = tiny(true);
  o.lr = 1e-2;
  o.warmup_steps = 5;
  torch::manual_seed(0);
  auto m = std::make_shared<LlamaLM>(o);
  volt::Trainer trainer(cycle_trainer(120));
  auto loader = cycle_loader(true);
  trainer.fit(*m, *loader);
  const double loss = trainer.callback_metrics().at("train_loss");
  CHECK(loss < 0.5);  // log(61) = 4.1 at the start
  auto next = m->generate(torch::tensor({3, 4, 5, 6}, torch::kLong), 5, 0.0);
  CHECK(next.equal(torch::tensor({7, 3, 4, 5, 6}, torch::kLong)));
  // test_ppl, logged from on_test_epoch_end, is exp of the epoch's mean token loss.
  volt::DataLoaderOptions eo;
  eo.batch_size = 5;  // 12 samples: a last batch of 2, weighted by its tokens
  volt::DataLoader test_loader(std::make_shared<CycleData>(12, 16), eo);
  const auto metrics = trainer.test(*m, test_loader);
  REQUIRE(metrics.count("test_ppl") == 1);
  CHECK(metrics.at("test_ppl") == Approx(std::exp(metrics.at("test_loss"))).epsilon(1e-6));
  CHECK(metrics.at("test_ppl") < 1.6);

  // A tied weight is saved once, under its first name, and loads back into both names.
  const std::string path = (std::filesystem::temp_directory_path() / "volt-llama-tied.ckpt").string();
  trainer.save_checkpoint(path);
  volt::CheckpointReader reader(path);
  CHECK(reader.has("state_dict", "model.embed_tokens.weight"));
  CHECK_FALSE(reader.has("state_dict", "lm_head.weight"));
  auto fresh = built(o, 99);
  const auto report = volt::load_weights(*fresh, path);
  CHECK(report.missing.empty());
  CHECK(torch::equal(fresh->named_parameters()["lm_head.weight"], m->named_parameters()["lm_head.weight"]));
  CHECK(fresh->named_parameters()["lm_head.weight"].unsafeGetTensorImpl() ==
        fresh->named_parameters()["model.embed_tokens.weight"].unsafeGetTensorImpl());
  std::filesystem::remove(path);
}

TEST_CASE("Llama on CUDA: flash attention (is_causal) matches the exact path, and FSDP bf16-mixed trains",
          "[cuda][llm]") {
  if (volt::testing::no_cuda()) return;
  auto m = built(tiny(true));
  m->to(torch::kCUDA);
  m->eval();
  {
    torch::NoGradGuard ng;
    auto ids = torch::randint(0, 61, {2, 40}, torch::kLong);
    const auto gpu = m->forward(ids.cuda()).cpu();  // SDPA with is_causal
    m->to(torch::kCPU);
    const auto cpu = m->forward(ids);  // the exact path
    CHECK(torch::allclose(gpu, cpu, 1e-4, 1e-4));
  }
  // The KV cache continues on the exact path: generation equals on both devices (greedy).
  const auto prompt = torch::tensor({3, 4, 5}, torch::kLong);
  const auto on_cpu = m->generate(prompt, 8, 0.0);
  m->to(torch::kCUDA);
  CHECK(torch::equal(m->generate(prompt, 8, 0.0), on_cpu));

  auto o = tiny(true);
  o.lr = 1e-2;
  torch::manual_seed(0);
  auto fresh = std::make_shared<LlamaLM>(o);
  auto t = cycle_trainer(80);
  t.accelerator = "cuda";
  t.devices = 1;
  t.strategy = "fsdp";
  t.strategy.fsdp.auto_wrap_policy = volt::ModulePolicy{{"LlamaDecoderLayer"}, 0, nullptr};
  t.precision = "bf16-mixed";
  volt::Trainer trainer(t);
  auto loader = cycle_loader(false);
  trainer.fit(*fresh, *loader);
  CHECK(trainer.callback_metrics().at("train_loss") < 1.0);
}

#if VOLT_HAVE_SDPA
namespace {
/// causal_attention with k and v of 2 heads for q's 4, against the same with k and v repeated to 4
/// heads (query head j reads kv head j / 2): outputs and the gradients of q, k and v.
void check_grouped_attention(torch::Device device, torch::ScalarType dtype, double tol) {
  torch::manual_seed(5);
  const auto opts = torch::TensorOptions().device(device).dtype(dtype);
  const auto q = torch::randn({2, 4, 48, 64}, opts).requires_grad_(true);
  const auto k = torch::randn({2, 2, 48, 64}, opts).requires_grad_(true);
  const auto v = torch::randn({2, 2, 48, 64}, opts).requires_grad_(true);
  const auto up = torch::randn({2, 4, 48, 64}, opts);
  const auto grouped = volt::compat::causal_attention(q, k, v, 0.0);
  const auto g = torch::autograd::grad({grouped}, {q, k, v}, {up});
  const auto repeated = volt::compat::causal_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), 0.0);
  const auto r = torch::autograd::grad({repeated}, {q, k, v}, {up});
  auto close = [&](const torch::Tensor& a, const torch::Tensor& b) {
    return torch::allclose(a.to(torch::kFloat), b.to(torch::kFloat), tol, tol);
  };
  CHECK(close(grouped, repeated));
  for (int i = 0; i < 3; ++i) CHECK(close(g[i], r[i]));
  // Not a repetition of every kv head: head 1 of q reads kv head 0, head 2 reads kv head 1.
  CHECK_FALSE(close(grouped.select(1, 1), grouped.select(1, 2)));
}
}  // namespace

TEST_CASE("causal_attention takes k and v with fewer heads than q (grouped-query), as if repeated", "[llm]") {
  check_grouped_attention(torch::kCPU, torch::kFloat, 1e-5);
  // Heads that do not divide: refused, naming both counts.
  const auto q = torch::randn({1, 4, 8, 16}), kv = torch::randn({1, 3, 8, 16});
  CHECK_THROWS_WITH(volt::compat::causal_attention(q, kv, kv, 0.0), Catch::Contains("3 kv heads do not divide 4"));
}

TEST_CASE(
    "causal_attention with grouped heads on CUDA equals repeated k and v (bf16: a fused kernel takes them "
    "as they are; float32: repeated)",
    "[cuda][llm]") {
  if (volt::testing::no_cuda()) return;
  check_grouped_attention(torch::kCUDA, torch::kBFloat16, 2e-2);
  check_grouped_attention(torch::kCUDA, torch::kFloat, 1e-4);
#if VOLT_TORCH_AT_LEAST(2, 5)
  // The Llama's case (bf16, head width 128): a fused kernel, not the math fallback, so that k and v
  // are not repeated (-1 error, 0 math).
  const auto o = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const auto q = torch::randn({2, 16, 256, 128}, o), kv = torch::randn({2, 8, 256, 128}, o);
  CHECK(at::_fused_sdp_choice(q, kv, kv, c10::nullopt, 0.0, true, c10::nullopt, true) > 0);
#endif
}
#endif

namespace {
/// The RMSNorm cases' module (weights in [0.5, 1.5]) and input, from seed 3.
std::pair<std::shared_ptr<volt::demos::RMSNorm>, torch::Tensor> rms_norm_case() {
  torch::manual_seed(3);
  auto norm = std::make_shared<volt::demos::RMSNorm>(64, 1e-5);
  {
    torch::NoGradGuard ng;
    norm->weight.uniform_(0.5, 1.5);
  }
  return {norm, torch::randn({2, 5, 64}) * 3};
}
}  // namespace

TEST_CASE("RMSNorm: at::rms_norm, where LibTorch has it, equals Hugging Face's formula", "[llm][rms_norm]") {
  using volt::demos::RMSNorm;
  auto [norm_ptr, x] = rms_norm_case();
  RMSNorm& norm = *norm_ptr;
  const torch::Tensor formula = norm.forward(x);  // the CPU path: the formula
  if (!volt::compat::kRmsNormOp) {
    CHECK_THROWS_WITH(volt::compat::rms_norm(x, norm.weight, 1e-5), Catch::Contains("LibTorch 2.4"));
    return;
  }
  CHECK(torch::allclose(volt::compat::rms_norm(x, norm.weight, 1e-5), formula, 1e-5, 1e-6));
  // bf16 input and weight: x's dtype back, within bf16 rounding of the formula's order of casts.
  const torch::Tensor xb = x.to(torch::kBFloat16), wb = norm.weight.detach().to(torch::kBFloat16);
  const torch::Tensor xf = xb.to(torch::kFloat);
  const torch::Tensor hf = wb * (xf * torch::rsqrt(xf.pow(2).mean(-1, true) + 1e-5)).to(torch::kBFloat16);
  const torch::Tensor got = volt::compat::rms_norm(xb, wb, 1e-5);
  CHECK(got.scalar_type() == torch::kBFloat16);
  CHECK(torch::allclose(got.to(torch::kFloat), hf.to(torch::kFloat), 2e-2, 1e-2));
  // Gradients of input and weight, in fp32.
  auto grads = [](const torch::Tensor& out, const torch::Tensor& in, const torch::Tensor& w) {
    return torch::autograd::grad({(out * out).sum()}, {in, w});
  };
  const torch::Tensor xa = x.clone().requires_grad_(true), wa = norm.weight.detach().clone().requires_grad_(true);
  const torch::Tensor xr = x.clone().requires_grad_(true), wr = norm.weight.detach().clone().requires_grad_(true);
  const auto g_op = grads(volt::compat::rms_norm(xa, wa, 1e-5), xa, wa);
  const auto g_formula = grads(wr * (xr * torch::rsqrt(xr.pow(2).mean(-1, true) + 1e-5)), xr, wr);
  CHECK(torch::allclose(g_op[0], g_formula[0], 1e-4, 1e-5));
  CHECK(torch::allclose(g_op[1], g_formula[1], 1e-4, 1e-5));
}

TEST_CASE("RMSNorm on the GPU: the module takes at::rms_norm and equals the CPU formula", "[cuda][llm][rms_norm]") {
  using volt::demos::RMSNorm;
  if (volt::testing::no_cuda()) return;
  auto [norm_ptr, x] = rms_norm_case();
  RMSNorm& norm = *norm_ptr;
  const torch::Tensor formula = norm.forward(x);  // the CPU path: the formula
  RMSNorm gpu(64, 1e-5);
  {
    torch::NoGradGuard ng;
    gpu.weight.copy_(norm.weight);
  }
  gpu.to(torch::kCUDA);
  CHECK(torch::allclose(gpu.forward(x.to(torch::kCUDA)).cpu(), formula, 1e-5, 1e-5));
}
