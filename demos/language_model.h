#pragma once
/// Lightning's demo LightningModule (`lightning.pytorch.demos.LightningTransformer`): the demo
/// Transformer trained as a language model with nll_loss, SGD(lr=0.1) by default. The model is
/// built in configure_model() (so a strategy can decide where), its state_dict names are
/// `model.<Transformer names>`, as Lightning's.
///
/// Thread-safety: as LightningModule (hooks from the training thread only).
#include <memory>
#include <string>

#include "volt/demos/transformer.h"
#include "volt/module/lightning_module.h"

namespace volt::demos {

/// The `model:` config section: the Transformer's options (flattened) plus the optimizer's.
struct LanguageModelOptions : TransformerOptions {
  std::string optimizer = "sgd";  ///< "sgd" or "adamw" (case-insensitive)
  double lr = 0.1;
  double weight_decay = 0.0;

  template <class V>
  void visit(V& v) {
    TransformerOptions::visit(v);
    v("optimizer", optimizer)("lr", lr)("weight_decay", weight_decay);
  }
  /// Throws ConfigError naming `<prefix>.<field>`.
  void validate(const std::string& prefix = "model") const;
  TransformerOptions transformer() const { return *this; }
};

class LanguageModel : public LightningModule {
 public:
  using Options = LanguageModelOptions;

  explicit LanguageModel(LanguageModelOptions options = {});

  /// Builds the Transformer (registered as "model") unless it exists already.
  void configure_model() override;
  Optimizers configure_optimizers() override;

  /// Log-probabilities [B*T, vocab_size] for inputs and (shifted) targets [B, T].
  torch::Tensor forward(const torch::Tensor& inputs, const torch::Tensor& target);
  /// nll_loss of the batch {inputs, target}; logs "train_loss" (prog_bar).
  torch::Tensor training_step(const Batch& batch, int64_t batch_idx) override;
  /// Logs "val_loss" (per epoch, averaged over ranks).
  void validation_step(const Batch& batch, int64_t batch_idx) override;
  /// Logs "test_loss" (per epoch, averaged over ranks).
  void test_step(const Batch& batch, int64_t batch_idx) override;
  /// {next_token: the most likely token at each position, target_log_prob: the log-probability of
  /// the actual next token}, both shaped as the batch's target (`volt predict` writes them).
  Batch predict_step(const Batch& batch, int64_t batch_idx) override;

  YAML::Node hparams() const override;
  const LanguageModelOptions& options() const { return options_; }
  /// The Transformer; throws ConfigError before configure_model().
  Transformer& model() const;
  bool is_configured() const { return model_ != nullptr; }

 private:
  torch::Tensor loss(const Batch& batch);
  LanguageModelOptions options_;
  std::shared_ptr<Transformer> model_;
};

}  // namespace volt::demos
