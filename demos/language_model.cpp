#include "volt/demos/language_model.h"

#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "volt/core/errors.h"
#include "volt/core/options.h"
#include "volt/trainer/trainer.h"

namespace volt::demos {

namespace {
std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}
}  // namespace

void LanguageModelOptions::validate(const std::string& prefix) const {
  TransformerOptions::validate(prefix);
  auto key = [&](const char* field) { return prefix.empty() ? std::string(field) : prefix + "." + field; };
  const std::string opt = lower(optimizer);
  VOLT_CHECK(opt == "sgd" || opt == "adamw", ConfigError, "config key '", key("optimizer"),
             "': must be 'sgd' or 'adamw', got '", optimizer, "'");
  VOLT_CHECK(lr > 0.0 && std::isfinite(lr), ConfigError, "config key '", key("lr"),
             "': must be a finite number > 0, got ", lr);
  VOLT_CHECK(weight_decay >= 0.0, ConfigError, "config key '", key("weight_decay"), "': must be >= 0, got ",
             weight_decay);
}

LanguageModel::LanguageModel(LanguageModelOptions options)
    : LightningModule("LanguageModel"), options_(std::move(options)) {
  options_.validate();
}

void LanguageModel::configure_model() {
  if (model_) return;
  // Under FSDP each layer is handed to wrap() as it is built, so no rank holds the whole model;
  // elsewhere it is built whole (once: the layer-by-layer build constructs each layer twice).
  UnitBuilt built;
  if (trainer() && trainer()->strategy().name() == "fsdp") built = [this](torch::nn::Module& m) { wrap_module(m); };
  model_ = register_module("model", std::make_shared<Transformer>(options_.transformer(), built));
}

Transformer& LanguageModel::model() const {
  VOLT_CHECK(model_ != nullptr, ConfigError,
             "LanguageModel: the Transformer is built in configure_model(); call it first");
  return *model_;
}

Optimizers LanguageModel::configure_optimizers() {
  OptimizerConfig config;
  if (lower(options_.optimizer) == "adamw") {
    config.optimizer = std::make_shared<torch::optim::AdamW>(
        parameters(), torch::optim::AdamWOptions(options_.lr).weight_decay(options_.weight_decay));
  } else {
    config.optimizer = std::make_shared<torch::optim::SGD>(
        parameters(), torch::optim::SGDOptions(options_.lr).weight_decay(options_.weight_decay));
  }
  return config;
}

torch::Tensor LanguageModel::forward(const torch::Tensor& inputs, const torch::Tensor& target) {
  return model().forward(inputs, target);
}

torch::Tensor LanguageModel::loss(const Batch& batch) {
  VOLT_CHECK(batch.size() >= 2, DataError, "LanguageModel: a batch must hold {inputs, target}, got ", batch.size(),
             " tensors");
  const auto& target = batch[1];
  auto output = forward(batch[0], target);
  return torch::nll_loss(output, target.reshape({-1}));
}

torch::Tensor LanguageModel::training_step(const Batch& batch, int64_t) {
  auto l = loss(batch);
  LogOptions o;
  o.prog_bar = true;
  log("train_loss", l.detach(), o);
  return l;
}

void LanguageModel::validation_step(const Batch& batch, int64_t) {
  LogOptions o;
  o.on_epoch = true;
  o.sync_dist = true;
  log("val_loss", loss(batch).detach(), o);
}

void LanguageModel::test_step(const Batch& batch, int64_t) {
  LogOptions o;
  o.on_epoch = true;
  o.sync_dist = true;
  log("test_loss", loss(batch).detach(), o);
}

Batch LanguageModel::predict_step(const Batch& batch, int64_t) {
  VOLT_CHECK(batch.size() >= 2, DataError, "LanguageModel: a batch must hold {inputs, target}, got ", batch.size(),
             " tensors");
  const auto& target = batch[1];
  const auto log_probs = forward(batch[0], target);  // one row per target position, as in loss()
  Batch out;
  out.set("next_token", log_probs.argmax(1).reshape(target.sizes()));
  out.set("target_log_prob", log_probs.gather(1, target.reshape({-1, 1})).reshape(target.sizes()));
  return out;
}

YAML::Node LanguageModel::hparams() const { return options_to_yaml(options_); }

}  // namespace volt::demos
