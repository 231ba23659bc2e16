#pragma once
#include <volt/volt.h>

// The model's options: a config's `model.init_args`. visit() names every key once, for reading
// YAML, --print_config and --help; validate() is optional.
struct RegressorOptions {
  int64_t hidden = 32;
  double lr = 0.05;

  template <class V>
  void visit(V& v) {
    v("hidden", hidden)("lr", lr);
  }
  void validate(const std::string& prefix) const {
    VOLT_CHECK(hidden >= 1, volt::ConfigError, "config key '", prefix, ".hidden': must be >= 1, got ", hidden);
  }
};

// A small MLP that learns y = x1 + ... + x8.
class Regressor : public volt::LightningModule {
 public:
  using Options = RegressorOptions;

  explicit Regressor(const RegressorOptions& options) : options_(options) {
    net = register_module("net", torch::nn::Sequential(torch::nn::Linear(8, options.hidden), torch::nn::Tanh(),
                                                       torch::nn::Linear(options.hidden, 1)));
  }
  torch::Tensor training_step(const volt::Batch& batch, int64_t) override {
    auto loss = torch::mse_loss(net->forward(batch[0]), batch[1]);
    log("train_loss", loss, {/*prog_bar=*/true});
    return loss;
  }
  void validation_step(const volt::Batch& batch, int64_t) override {
    log("val_loss", torch::mse_loss(net->forward(batch[0]), batch[1]));
  }
  volt::Batch predict_step(const volt::Batch& batch, int64_t) override { return {net->forward(batch[0])}; }
  volt::Optimizers configure_optimizers() override {
    return {std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(options_.lr))};
  }
  YAML::Node hparams() const override { return volt::options_to_yaml(options_); }

 private:
  RegressorOptions options_;
  torch::nn::Sequential net{nullptr};
};
