#include <volt/volt.h>

#include <iostream>

namespace {
struct Data : volt::Dataset {
  torch::Tensor x = torch::randn({32, 4});
  int64_t size() const override { return 32; }
  volt::Batch get(int64_t i) const override { return {x[i], x[i].sum().unsqueeze(0)}; }
};
struct Net : volt::LightningModule {
  torch::nn::Linear fc{nullptr};
  Net() { fc = register_module("fc", torch::nn::Linear(4, 1)); }
  torch::Tensor training_step(const volt::Batch& b, int64_t) override {
    return torch::mse_loss(fc->forward(b[0]), b[1]);
  }
  volt::OptimizerConfig configure_optimizers() override {
    return {std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.05))};
  }
};
}  // namespace

int main(int argc, char** argv) {
  volt::TrainerOptions o;
  o.max_epochs = 5;
  o.enable_progress_bar = false;
  o.enable_checkpointing = false;
  o.default_root_dir = argc > 1 ? argv[1] : ".";
  volt::Trainer t(o);
  Net net;
  volt::DataLoader loader(std::make_shared<Data>(), {8, true});
  t.fit(net, loader);
  std::cout << "downstream ok: " << t.global_step() << " steps" << std::endl;
  return t.global_step() == 20 ? 0 : 1;
}
