#pragma once
/// A test model for the finetuning callbacks: a `backbone` (two Linear + tanh) and a `head`, MSE
/// against ones. configure_optimizers gives the optimizer the head only (the backbone joins it as a
/// param group when BackboneFinetuning unfreezes it). Deterministic given the seed.
#include <torch/torch.h>

#include "volt/module/lightning_module.h"

namespace volt::testing {

class BackboneNet : public torch::nn::Module {
 public:
  explicit BackboneNet(int64_t dim = 32, int64_t hidden = 16) {
    fc1 = register_module("fc1", torch::nn::Linear(dim, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, hidden));
  }
  torch::Tensor forward(const torch::Tensor& x) { return torch::tanh(fc2->forward(torch::tanh(fc1->forward(x)))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

class BackboneModel : public LightningModule {
 public:
  explicit BackboneModel(double lr = 0.01, bool adam = true) : LightningModule("BackboneModel"), lr_(lr), adam_(adam) {
    backbone = register_module("backbone", std::make_shared<BackboneNet>());
    head = register_module("head", torch::nn::Linear(16, 2));
  }
  torch::Tensor forward(const torch::Tensor& x) { return head->forward(backbone->forward(x)); }
  torch::Tensor training_step(const Batch& batch, int64_t) override {
    auto out = forward(batch[0]);
    return torch::mse_loss(out, torch::ones_like(out));
  }
  void validation_step(const Batch& batch, int64_t) override {
    auto out = forward(batch[0]);
    log("val_loss", torch::mse_loss(out, torch::ones_like(out)), {.sync_dist = true});
  }
  Optimizers configure_optimizers() override {
    if (adam_) return std::make_shared<torch::optim::Adam>(head->parameters(), torch::optim::AdamOptions(lr_));
    return std::make_shared<torch::optim::SGD>(head->parameters(), torch::optim::SGDOptions(lr_));
  }
  std::shared_ptr<BackboneNet> backbone;
  torch::nn::Linear head{nullptr};

 private:
  double lr_;
  bool adam_;
};

}  // namespace volt::testing
