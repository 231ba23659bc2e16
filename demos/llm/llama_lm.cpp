#include "volt/demos/llm/llama_lm.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <cmath>
#include <set>

#include "volt/core/errors.h"
#include "volt/core/options.h"
#include "volt/demos/llm/token_cross_entropy.h"
#include "volt/module/lr_scheduler.h"
#include "volt/trainer/trainer.h"

namespace volt::demos {

namespace {
constexpr int64_t kIgnoreIndex = -100;

std::string key_of(const std::string& prefix, const char* field) {
  return prefix.empty() ? std::string(field) : prefix + "." + field;
}

const torch::Tensor& named(const Batch& batch, const char* name) {
  VOLT_CHECK(batch.contains(name), DataError, "LlamaLM: a batch must hold named tensors {input_ids, labels}; '", name,
             "' is missing (names: ", batch.names().size(), ")");
  return batch.at(name);
}
}  // namespace

void LlamaLMOptions::validate(const std::string& prefix) const {
  LlamaOptions::validate(prefix);
  auto finite_positive = [&](double v, const char* field) {
    VOLT_CHECK(v > 0.0 && std::isfinite(v), ConfigError, "config key '", key_of(prefix, field),
               "': must be a finite number > 0, got ", v);
  };
  finite_positive(lr, "lr");
  finite_positive(eps, "eps");
  VOLT_CHECK(weight_decay >= 0.0 && std::isfinite(weight_decay), ConfigError, "config key '",
             key_of(prefix, "weight_decay"), "': must be >= 0, got ", weight_decay);
  for (auto [v, field] : {std::pair{beta1, "beta1"}, std::pair{beta2, "beta2"}})
    VOLT_CHECK(v >= 0.0 && v < 1.0, ConfigError, "config key '", key_of(prefix, field), "': must be in [0, 1), got ",
               v);
  VOLT_CHECK(warmup_steps >= 0, ConfigError, "config key '", key_of(prefix, "warmup_steps"), "': must be >= 0, got ",
             warmup_steps);
  VOLT_CHECK(lr_decay_steps >= 0, ConfigError, "config key '", key_of(prefix, "lr_decay_steps"),
             "': must be >= 0 (0: trainer.max_steps), got ", lr_decay_steps);
  VOLT_CHECK(lr_decay_steps == 0 || lr_decay_steps > warmup_steps, ConfigError, "config key '",
             key_of(prefix, "lr_decay_steps"), "': ", lr_decay_steps, " is not more than ",
             key_of(prefix, "warmup_steps"), " (", warmup_steps,
             "): the cosine decay runs from the end of warm-up to step lr_decay_steps, so it would never start");
  VOLT_CHECK(min_lr_ratio >= 0.0 && min_lr_ratio <= 1.0, ConfigError, "config key '", key_of(prefix, "min_lr_ratio"),
             "': must be in [0, 1], got ", min_lr_ratio);
}

double warmup_cosine(int64_t step, int64_t warmup, int64_t decay_steps, double min_ratio) {
  if (step < warmup) return static_cast<double>(step + 1) / static_cast<double>(warmup + 1);
  if (decay_steps <= warmup) return 1.0;
  const double progress = std::min(1.0, static_cast<double>(step - warmup) / static_cast<double>(decay_steps - warmup));
  return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

LMHead::LMHead(int64_t vocab, int64_t dim, double std) : HookedModule("LMHead") {
  torch::NoGradGuard ng;
  weight = register_parameter("weight", torch::empty({vocab, dim}).normal_(0.0, std));
}

LMHead::LMHead(const torch::Tensor& tied) : HookedModule("LMHead") { weight = register_parameter("weight", tied); }

torch::Tensor LMHead::forward(const torch::Tensor& x) {
  return intercepted({x}, [this](const TensorVec& in) { return torch::nn::functional::linear(in[0], weight); });
}

LlamaLM::LlamaLM(LlamaLMOptions options) : LightningModule("LlamaLM"), options_(std::move(options)) {
  options_.validate();
}

void LlamaLM::configure_model() {
  if (model_) return;
  LayerBuilt built;
  if (trainer() && trainer()->strategy().name() == "fsdp") built = [this](torch::nn::Module& m) { wrap_module(m); };
  model_ = register_module("model", std::make_shared<LlamaModel>(options_.architecture(), built));
  lm_head_ = options_.tie_word_embeddings
                 ? std::make_shared<LMHead>(model_->embedding_weight())
                 : std::make_shared<LMHead>(options_.vocab_size, options_.hidden_size, options_.initializer_range);
  register_module("lm_head", lm_head_);
}

LlamaModel& LlamaLM::model() const {
  VOLT_CHECK(model_ != nullptr, ConfigError, "LlamaLM: the model is built in configure_model(); call it first");
  return *model_;
}

int64_t LlamaLM::decay_steps() const {
  if (options_.lr_decay_steps > 0) return options_.lr_decay_steps;
  return trainer() && trainer()->max_steps() > 0 ? trainer()->max_steps() : 0;
}

Optimizers LlamaLM::configure_optimizers() {
  // Decay on Linear weights; none on norms and the embedding (a tied lm_head is the embedding).
  const c10::TensorImpl* embedding = model().embedding_weight().unsafeGetTensorImpl();
  std::set<const c10::TensorImpl*> seen;
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& kv : named_parameters()) {
    const auto& p = kv.value();
    if (!seen.insert(p.unsafeGetTensorImpl()).second) continue;  // tied: listed under both names
    (p.dim() == 2 && p.unsafeGetTensorImpl() != embedding ? decay : no_decay).push_back(p);
  }
  auto adamw = [&](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(options_.lr)
                                                            .betas({options_.beta1, options_.beta2})
                                                            .eps(options_.eps)
                                                            .weight_decay(wd));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, adamw(options_.weight_decay));
  groups.emplace_back(no_decay, adamw(0.0));
  OptimizerConfig config;
  config.optimizer = std::make_shared<torch::optim::AdamW>(groups, *adamw(options_.weight_decay));
  const int64_t warmup = options_.warmup_steps, steps = decay_steps();
  const double min_ratio = options_.min_lr_ratio;
  if (warmup > 0 || steps > 0) {
    config.lr_scheduler = std::make_shared<LambdaLR>(
        *config.optimizer, [=](int64_t step) { return warmup_cosine(step, warmup, steps, min_ratio); });
    config.interval = SchedulerInterval::Step;
  }
  if (steps == 0 && trainer())
    spdlog::info(
        "LlamaLM: constant learning rate after warm-up (set model.lr_decay_steps or trainer.max_steps "
        "for the cosine decay)");
  return config;
}

torch::Tensor LlamaLM::forward(const torch::Tensor& input_ids) { return lm_head_->forward(model().forward(input_ids)); }

torch::Tensor LlamaLM::loss(const Batch& batch) {
  const auto& ids = named(batch, "input_ids");
  const auto& labels = named(batch, "labels");
  VOLT_CHECK(ids.sizes() == labels.sizes(), DataError, "LlamaLM: input_ids ", ids.sizes(), " and labels ",
             labels.sizes(), " differ in shape");
  // F.cross_entropy(logits.float(), labels) without float32 copies of the logits
  // ([Note: cross-entropy with its gradient made in the forward]).
  return token_cross_entropy(forward(ids), labels, kIgnoreIndex);
}

torch::Tensor LlamaLM::training_step(const Batch& batch, int64_t) {
  auto l = loss(batch);
  const auto& ids = batch.at("input_ids");
  last_batch_ = ids.size(0);
  last_seq_ = ids.size(1);
  LogOptions o;
  o.prog_bar = true;
  log("train_loss", l.detach(), o);
  return l;
}

void LlamaLM::validation_step(const Batch& batch, int64_t) {
  LogOptions o;
  o.on_epoch = true;
  o.sync_dist = true;
  o.prog_bar = true;
  log("val_loss", loss(batch).detach(), o);
}

void LlamaLM::test_step(const Batch& batch, int64_t batch_idx) {
  const auto l = loss(batch).detach();
  const auto tokens = (named(batch, "labels") != kIgnoreIndex).sum().to(torch::kDouble).cpu();
  if (batch_idx == 0 || !test_nll_.defined()) {
    test_nll_ = torch::zeros({}, torch::kDouble);
    test_tokens_ = torch::zeros({}, torch::kDouble);
  }
  test_nll_ += l.to(torch::kDouble).cpu() * tokens;
  test_tokens_ += tokens;
  LogOptions o;
  o.on_epoch = true;
  o.sync_dist = true;
  log("test_loss", l, o);
}

void LlamaLM::on_test_epoch_end() {
  if (!test_nll_.defined() || trainer() == nullptr) return;
  auto& strategy = trainer()->strategy();
  const double nll = strategy.all_reduce(test_nll_, ReduceOp::Sum).item<double>();
  const double tokens = strategy.all_reduce(test_tokens_, ReduceOp::Sum).item<double>();
  test_nll_ = torch::Tensor();
  if (tokens > 0) log("test_ppl", std::exp(nll / tokens));
}

torch::Tensor LlamaLM::generate(const torch::Tensor& prompt, int64_t max_new_tokens, double temperature, int64_t top_k,
                                int64_t stop_id, std::optional<at::Generator> generator, int64_t vocab_limit) {
  VOLT_CHECK(prompt.dim() == 1 && prompt.numel() > 0, ConfigError,
             "generate: the prompt must be a non-empty list of token ids, got shape ", prompt.sizes());
  VOLT_CHECK(max_new_tokens >= 0, ConfigError, "generate: max_new_tokens must be >= 0, got ", max_new_tokens);
  VOLT_CHECK(temperature >= 0.0 && std::isfinite(temperature), ConfigError,
             "generate: temperature must be a finite number >= 0 (0: greedy), got ", temperature);
  VOLT_CHECK(top_k >= 0, ConfigError, "generate: top_k must be >= 0 (0: every token), got ", top_k);
  VOLT_CHECK(vocab_limit >= 0 && vocab_limit <= options_.vocab_size, ConfigError,
             "generate: vocab_limit must be in [0, vocab_size = ", options_.vocab_size, "] (0: every id), got ",
             vocab_limit);
  auto& m = model();
  // The last new token is returned, not fed back: the model sees prompt + max_new_tokens - 1.
  const int64_t total = prompt.numel() + std::max<int64_t>(max_new_tokens - 1, 0);
  VOLT_CHECK(total <= options_.max_position_embeddings, ConfigError, "generate: prompt (", prompt.numel(),
             " tokens) + max_new_tokens (", max_new_tokens, ") need ", total,
             " positions (the last new token is not fed back), more than the model's max_position_embeddings (",
             options_.max_position_embeddings, ")");
  const bool was_training = is_training();
  eval();
  torch::NoGradGuard ng;
  const auto device = m.embedding_weight().device();
  auto cache = m.make_cache(1, total);
  auto next_input = prompt.to(device, torch::kLong).unsqueeze(0);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    auto logits = lm_head_->forward(m.forward(next_input, &cache)).select(1, -1).squeeze(0).to(torch::kFloat);
    if (vocab_limit > 0) logits = logits.narrow(0, 0, vocab_limit);
    int64_t id;
    if (temperature == 0.0) {
      id = logits.argmax().item<int64_t>();
    } else {
      // In float64 (a temperature of 1e-300 is 0 in float32) and shifted so that the largest is 0: a
      // tiny temperature then gives 0 and -inf, never inf - inf or 0 / 0.
      logits = logits.to(torch::kDouble);
      logits = (logits - logits.max()) / temperature;
      if (top_k > 0 && top_k < logits.size(0)) {
        const auto kth = std::get<0>(logits.topk(top_k)).select(0, top_k - 1);
        logits = logits.masked_fill(logits < kth, -std::numeric_limits<float>::infinity());
      }
      const c10::optional<at::Generator> gen = generator ? c10::optional<at::Generator>(*generator) : c10::nullopt;
      id = torch::multinomial(torch::softmax(logits, -1), 1, false, gen).item<int64_t>();
    }
    out.push_back(id);
    if (id == stop_id) break;
    next_input = torch::full({1, 1}, id, torch::TensorOptions().dtype(torch::kLong).device(device));
  }
  if (was_training) train();
  return torch::tensor(out, torch::kLong);
}

double LlamaLM::flops_per_batch() const {
  return options_.flops_per_token(last_seq_) * static_cast<double>(last_batch_ * last_seq_);
}

YAML::Node LlamaLM::hparams() const { return options_to_yaml(options_); }

}  // namespace volt::demos
