#pragma once
/// A model made only of stock torch::nn layers, as a user's model would be: an input projection,
/// a stack of torch::nn::TransformerEncoderLayer (each wrapped by volt::hooked, unchanged inside)
/// and a LayerNorm + Linear head. With `deferred`, the layers are built in configure_model() and
/// each handed to wrap() as it is built (FSDP shards it at once); otherwise they are built in the
/// constructor and the strategy's policies pick them. Inputs: RandomDataset's 32 features read as
/// 4 positions x 8 features; MSE against ones, SGD.
#include <torch/torch.h>

#include "boring_model.h"
#include "volt/core/hooked_wrapper.h"

namespace volt::testing {

struct StockEncoderOptions {
  int64_t layers = 2;
  int64_t d_model = 16;
  double lr = 0.1;
  bool deferred = false;
};

class StockEncoderModel : public LightningModule {
 public:
  using Layer = Hooked<torch::nn::TransformerEncoderLayer>;
  explicit StockEncoderModel(StockEncoderOptions o = {}) : LightningModule("StockEncoderModel"), o_(o) {
    if (!o_.deferred) build();
  }
  void configure_model() override {
    if (!built_) build();
  }
  torch::Tensor forward(const torch::Tensor& x) {
    // [B, 32] -> [4 positions, B, 8 features] (the encoder's sequence-first layout).
    torch::Tensor h = proj->forward(x.view({x.size(0), 4, 8}).transpose(0, 1));
    for (const auto& layer : *layers) h = layer->as<Layer::ContainedType>()->forward(h);
    return head->forward(norm->forward(h).mean(0));
  }
  torch::Tensor training_step(const Batch& batch, int64_t) override {
    auto out = forward(batch[0]);
    auto loss = torch::mse_loss(out, torch::ones_like(out));
    log("train_loss", loss);
    return loss;
  }
  void validation_step(const Batch& batch, int64_t) override {
    auto out = forward(batch[0]);
    log("val_loss", torch::mse_loss(out, torch::ones_like(out)), {.sync_dist = true});
  }
  Optimizers configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(o_.lr));
  }

  Hooked<torch::nn::Linear> proj{nullptr};
  torch::nn::ModuleList layers{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear head{nullptr};

 private:
  void build() {
    built_ = true;
    auto unit = [&](auto m) { return o_.deferred ? wrap(m) : m; };
    proj = register_module("proj", unit(hooked(torch::nn::Linear(8, o_.d_model))));
    layers = register_module("layers", torch::nn::ModuleList());
    for (int64_t i = 0; i < o_.layers; ++i) {
      auto opts = torch::nn::TransformerEncoderLayerOptions(o_.d_model, 2).dim_feedforward(2 * o_.d_model).dropout(0.0);
      layers->push_back(unit(hooked(torch::nn::TransformerEncoderLayer(opts))));
    }
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o_.d_model})));
    head = register_module("head", torch::nn::Linear(o_.d_model, 2));
  }
  StockEncoderOptions o_;
  bool built_ = false;
};

}  // namespace volt::testing
