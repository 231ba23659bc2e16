#pragma once
/// The LLM workload's LightningModule: a Llama decoder (`model`, llama.h) and its output projection
/// (`lm_head`), trained on next-token cross-entropy with the usual recipe: AdamW with weight decay
/// on the Linear weights only (not on norms or embeddings), a linear warm-up then a cosine decay,
/// gradient clipping through `trainer.gradient_clip_val`. Its state_dict names are Hugging Face's
/// `LlamaForCausalLM` names (`model.embed_tokens.weight`, ..., `lm_head.weight`), so that
/// `volt consolidate --format safetensors` gives weights Llama code reads.
///
/// Batches: {"input_ids": [B, T], "labels": [B, T]} int64 (label -100 is ignored).
///
/// Thread-safety: as LightningModule (hooks from the training thread only).
#include <memory>
#include <optional>
#include <string>

#include "volt/callbacks/throughput_monitor.h"
#include "volt/demos/llm/llama.h"
#include "volt/module/lightning_module.h"

namespace volt::demos {

/// The `model:` config section: the architecture (flattened) plus the training recipe.
struct LlamaLMOptions : LlamaOptions {
  double lr = 3e-4;
  double weight_decay = 0.1;  ///< on 2-D Linear weights only
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  int64_t warmup_steps = 0;  ///< linear warm-up from lr / (warmup_steps + 1) to lr
  /// Optimizer steps of the cosine decay (warm-up included); 0: trainer.max_steps, or no decay
  /// when max_steps is unset (-1).
  int64_t lr_decay_steps = 0;
  double min_lr_ratio = 0.1;  ///< the decay ends at min_lr_ratio * lr

  template <class V>
  void visit(V& v) {
    LlamaOptions::visit(v);
    v("lr", lr)("weight_decay", weight_decay)("beta1", beta1)("beta2", beta2)("eps", eps)("warmup_steps", warmup_steps)(
        "lr_decay_steps", lr_decay_steps)("min_lr_ratio", min_lr_ratio);
  }
  /// Throws ConfigError naming `<prefix>.<field>`.
  void validate(const std::string& prefix = "model") const;
  LlamaOptions architecture() const { return *this; }
};

/// The learning-rate factor at optimizer step `step` (0-based): (step + 1) / (warmup + 1) during
/// warm-up, then min_ratio + (1 - min_ratio) * (1 + cos(pi * progress)) / 2 with progress =
/// (step - warmup) / (decay_steps - warmup) clamped to [0, 1]; decay_steps <= warmup: 1 after it.
double warmup_cosine(int64_t step, int64_t warmup, int64_t decay_steps, double min_ratio);

/// `lm_head`: logits = x W^T with W [vocab, d]; W is embed_tokens' weight when tied. Hooked, so
/// that a policy may make it a unit ("LMHead"); a tied weight then goes to the root unit.
class LMHead : public HookedModule {
 public:
  /// A weight of its own, normal(0, std).
  LMHead(int64_t vocab, int64_t dim, double std);
  /// The given tensor (tied): the same TensorImpl, so the module lists it as its own parameter.
  explicit LMHead(const torch::Tensor& tied);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;
};

class LlamaLM : public LightningModule, public FlopsPerBatch {
 public:
  using Options = LlamaLMOptions;

  explicit LlamaLM(LlamaLMOptions options = {});

  /// Builds the decoder (registered as "model") and "lm_head" unless they exist; under FSDP each
  /// decoder layer is handed to wrap() as it is built, so no rank holds the whole model.
  void configure_model() override;
  /// AdamW over two param groups (decayed Linear weights, then norms and embeddings without decay;
  /// a tied weight appears once) and a per-step LambdaLR of warmup_cosine.
  Optimizers configure_optimizers() override;

  /// Logits [B, T, vocab] of input_ids [B, T].
  torch::Tensor forward(const torch::Tensor& input_ids);
  /// Mean cross-entropy of the batch's labels (in float32).
  torch::Tensor loss(const Batch& batch);
  /// Logs "train_loss" (prog_bar).
  torch::Tensor training_step(const Batch& batch, int64_t batch_idx) override;
  /// Logs "val_loss" (epoch mean over every rank's tokens).
  void validation_step(const Batch& batch, int64_t batch_idx) override;
  /// Logs "test_loss"; on_test_epoch_end logs "test_ppl" = exp(the mean token loss over ranks).
  void test_step(const Batch& batch, int64_t batch_idx) override;
  void on_test_epoch_end() override;

  /// Samples `max_new_tokens` tokens after `prompt` (ids [T], at least one), with a KV cache: each
  /// step takes the last logits / temperature, keeps the top_k (0: all), and draws from the
  /// softmax with `generator` (greedy when temperature is 0). Stops early at `stop_id` (>= 0).
  /// Only ids below `vocab_limit` are drawn (0: the whole vocabulary): a vocabulary padded beyond
  /// the tokenizer's (configs/llm/1b.yaml: 32,000 for 8,000 pieces) never yields an id the
  /// tokenizer cannot decode. prompt + max_new_tokens - 1 positions must fit in
  /// max_position_embeddings (the last new token is not fed back; Hugging Face counts the same).
  /// Returns the new ids only. Runs without gradients, in eval mode, on the model's device.
  torch::Tensor generate(const torch::Tensor& prompt, int64_t max_new_tokens, double temperature = 1.0,
                         int64_t top_k = 0, int64_t stop_id = -1, std::optional<at::Generator> generator = std::nullopt,
                         int64_t vocab_limit = 0);

  /// FLOPs of the last training batch on this device, as torchtitan counts them
  /// (LlamaOptions::flops_per_token x its tokens), for ThroughputMonitor's flops_per_sec and MFU.
  double flops_per_batch() const override;

  YAML::Node hparams() const override;
  const LlamaLMOptions& options() const { return options_; }
  /// The decoder; throws ConfigError before configure_model().
  LlamaModel& model() const;
  bool is_configured() const { return model_ != nullptr; }

 private:
  int64_t decay_steps() const;
  LlamaLMOptions options_;
  std::shared_ptr<LlamaModel> model_;
  std::shared_ptr<LMHead> lm_head_;
  torch::Tensor test_nll_, test_tokens_;   // this rank's sums over the test epoch
  int64_t last_batch_ = 0, last_seq_ = 0;  // shape of the last training batch
};

}  // namespace volt::demos
