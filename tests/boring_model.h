#pragma once
/// The one reusable test model, after Lightning's BoringModel: random 32-d inputs, a small MLP whose
/// hidden blocks are HookedModules (so FSDP and activation checkpointing can act on them), MSE
/// against ones, SGD. Deterministic given the seed.
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "volt/core/hooked_module.h"
#include "volt/module/lightning_module.h"
#include "volt/trainer/trainer_options.h"

namespace volt::testing {

/// A Linear + activation (+ optional dropout) routed through HookedModule::intercepted.
class Block : public HookedModule {
 public:
  Block(int64_t in, int64_t out, double dropout = 0.0) : HookedModule("Block"), dropout_(dropout) {
    linear = register_module("linear", torch::nn::Linear(in, out));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return intercepted({x}, [this](const TensorVec& in) {
      auto y = torch::tanh(linear->forward(in[0]));
      return dropout_ > 0 ? torch::dropout(y, dropout_, is_training()) : y;
    });
  }
  torch::nn::Linear linear{nullptr};

 private:
  double dropout_;
};

/// Random inputs (size x dim) drawn from a fixed seed; targets are implied (ones).
class RandomDataset : public Dataset {
 public:
  RandomDataset(int64_t size, int64_t dim = 32, uint64_t seed = 1234) {
    auto gen = at::detail::createCPUGenerator(seed);
    data_ = torch::randn({size, dim}, gen);
  }
  int64_t size() const override { return data_.size(0); }
  Batch get(int64_t i) const override { return {data_[i]}; }

 private:
  torch::Tensor data_;
};

struct BoringOptions {
  int64_t dim = 32;
  int64_t hidden = 32;
  int64_t blocks = 2;
  double lr = 0.1;
  double dropout = 0.0;
  bool adam = false;
};

class BoringModel : public LightningModule {
 public:
  explicit BoringModel(BoringOptions o = {}) : LightningModule("BoringModel"), o_(o) {
    int64_t d = o.dim;
    for (int64_t i = 0; i < o.blocks; ++i) {
      blocks.push_back(register_module("block" + std::to_string(i), std::make_shared<Block>(d, o.hidden, o.dropout)));
      d = o.hidden;
    }
    head = register_module("head", torch::nn::Linear(d, 2));
  }
  torch::Tensor forward(torch::Tensor x) {
    for (auto& b : blocks) x = b->forward(x);
    return head->forward(x);
  }
  torch::Tensor training_step(const Batch& batch, int64_t) override {
    auto out = forward(batch[0]);
    auto loss = torch::mse_loss(out, torch::ones_like(out));
    losses.push_back(loss.item<double>());
    log("train_loss", loss, {.prog_bar = true});
    return loss;
  }
  void validation_step(const Batch& batch, int64_t) override {
    auto out = forward(batch[0]);
    log("val_loss", torch::mse_loss(out, torch::ones_like(out)), {.sync_dist = true});
  }
  void test_step(const Batch& batch, int64_t) override {
    auto out = forward(batch[0]);
    log("test_loss", torch::mse_loss(out, torch::ones_like(out)), {.sync_dist = true});
  }
  Optimizers configure_optimizers() override {
    OptimizerConfig c;
    if (o_.adam)
      c.optimizer = std::make_shared<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(o_.lr));
    else
      c.optimizer = std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(o_.lr));
    return c;
  }
  std::vector<std::shared_ptr<Block>> blocks;
  torch::nn::Linear head{nullptr};
  std::vector<double> losses;  // every training_step's loss, in order

 private:
  BoringOptions o_;
};

/// Trainer options for quiet, fast tests writing under `root`.
inline TrainerOptions quiet_options(const std::string& root) {
  TrainerOptions t;
  t.default_root_dir = root;
  t.enable_progress_bar = false;
  t.enable_model_summary = false;
  t.enable_checkpointing = false;
  t.num_sanity_val_steps = 0;
  t.max_epochs = 1;
  return t;
}

/// Runs one process per entry (argv, extra environment) in parallel, each with its output in
/// `<log_prefix>.<i>.log`; kills all after `timeout_s`. Returns the exit codes (128+signal when
/// killed by a signal, -1 on timeout). With `until` >= 0, the others are killed (SIGKILL) as soon as
/// process `until` has exited (a rank left stopped or hung on purpose).
std::vector<int> run_processes(const std::vector<std::vector<std::string>>& argvs,
                               const std::vector<std::map<std::string, std::string>>& envs, int timeout_s,
                               const std::string& log_prefix, int until = -1);
/// Reads a file into a string ("" if missing).
std::string read_text(const std::string& path);

/// A fresh temporary directory (removed by the OS's tmp cleaning; tests keep it for inspection).
std::string temp_dir(const std::string& tag);

/// The pid of a process that has exited and been reaped (a killed writer's, for its leftovers).
long dead_pid();

}  // namespace volt::testing
