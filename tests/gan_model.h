#pragma once
/// A small GAN for manual optimization tests: a generator and a discriminator, each a Block (a
/// HookedModule, so FSDP can make it a unit) and a Linear head, trained alternately with two Adam
/// optimizers (generator first), the generator's StepLR stepped by the module at each epoch's end.
/// The noise is derived from the batch (not drawn), so any world size sees the same values.
#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "boring_model.h"
#include "volt/module/lightning_module.h"

namespace volt::testing {

struct GanOptions {
  int64_t dim = 32, noise = 8, hidden = 16;
  double g_lr = 0.01, d_lr = 0.02;
  bool toggle = true;     // toggle_optimizer around each half-step
  bool scheduler = true;  // a StepLR(step_size 1, gamma 0.5) on the generator, stepped per epoch
  double clip = 0.0;      // > 0: clip_gradients of the discriminator before its step
};

class GanModel : public LightningModule {
 public:
  explicit GanModel(GanOptions o = {}) : LightningModule("GanModel"), o_(o) {
    g_block = register_module("g_block", std::make_shared<Block>(o.noise, o.hidden));
    g_head = register_module("g_head", torch::nn::Linear(o.hidden, o.dim));
    d_block = register_module("d_block", std::make_shared<Block>(o.dim, o.hidden));
    d_head = register_module("d_head", torch::nn::Linear(o.hidden, 1));
    automatic_optimization = false;
  }
  std::vector<torch::Tensor> generator_parameters() const {
    auto a = g_block->parameters(), b = g_head->parameters();
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }
  std::vector<torch::Tensor> discriminator_parameters() const {
    auto a = d_block->parameters(), b = d_head->parameters();
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }
  torch::Tensor noise(const torch::Tensor& real) const { return real.narrow(1, 0, o_.noise).detach() * 0.5; }
  torch::Tensor generate(const torch::Tensor& z) { return g_head->forward(g_block->forward(z)); }
  torch::Tensor discriminate(const torch::Tensor& x) { return d_head->forward(d_block->forward(x)); }

  /// One alternating step on `real`; `backward`, `step(i)` and `zero(i)` are volt's calls or a
  /// hand-written loop's, `toggle(i)` / `untoggle(i)` likewise.
  template <class Backward, class Step, class Zero, class Toggle, class Untoggle, class Clip>
  std::pair<torch::Tensor, torch::Tensor> gan_step(const torch::Tensor& real, Backward backward, Step step, Zero zero,
                                                   Toggle toggle, Untoggle untoggle, Clip clip) {
    const auto z = noise(real);
    if (o_.toggle) toggle(0);
    auto logit = discriminate(generate(z));
    auto g_loss = torch::binary_cross_entropy_with_logits(logit, torch::ones_like(logit));
    backward(g_loss);
    step(0);
    zero(0);
    if (o_.toggle) untoggle(0);
    if (o_.toggle) toggle(1);
    auto real_logit = discriminate(real);
    auto fake_logit = discriminate(generate(z).detach());
    auto d_loss = 0.5 * (torch::binary_cross_entropy_with_logits(real_logit, torch::ones_like(real_logit)) +
                         torch::binary_cross_entropy_with_logits(fake_logit, torch::zeros_like(fake_logit)));
    backward(d_loss);
    if (o_.clip > 0) clip(1);
    step(1);
    zero(1);
    if (o_.toggle) untoggle(1);
    return {g_loss.detach(), d_loss.detach()};
  }

  torch::Tensor training_step(const Batch& batch, int64_t) override {
    auto opts = optimizers();
    auto [g_loss, d_loss] = gan_step(
        batch[0], [&](const torch::Tensor& l) { manual_backward(l); }, [&](int i) { opts[i]->step(); },
        [&](int i) { opts[i]->zero_grad(); }, [&](int i) { toggle_optimizer(*opts[i]); },
        [&](int i) { untoggle_optimizer(*opts[i]); }, [&](int i) { clip_gradients(*opts[i], o_.clip); });
    g_losses.push_back(g_loss.item<double>());
    log("g_loss", g_loss, {.prog_bar = true});
    log("d_loss", d_loss);
    return d_loss;
  }
  void validation_step(const Batch& batch, int64_t) override {
    auto logit = discriminate(batch[0]);
    log("val_loss", torch::binary_cross_entropy_with_logits(logit, torch::ones_like(logit)), {.sync_dist = true});
  }
  void on_train_epoch_end() override {
    for (auto* s : lr_schedulers()) s->step();
  }
  Optimizers configure_optimizers() override {
    OptimizerConfig g{std::make_shared<torch::optim::Adam>(generator_parameters(), torch::optim::AdamOptions(o_.g_lr))};
    if (o_.scheduler) g.lr_scheduler = std::make_shared<StepLR>(*g.optimizer, 1, 0.5);
    OptimizerConfig d{
        std::make_shared<torch::optim::Adam>(discriminator_parameters(), torch::optim::AdamOptions(o_.d_lr))};
    return std::vector<OptimizerConfig>{g, d};
  }

  std::shared_ptr<Block> g_block, d_block;
  torch::nn::Linear g_head{nullptr}, d_head{nullptr};
  std::vector<double> g_losses;

 private:
  GanOptions o_;
};

}  // namespace volt::testing
