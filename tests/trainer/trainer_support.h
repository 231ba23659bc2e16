#pragma once
// Shared fixtures of the Trainer tests (tests/trainer/test_*.cpp): seeded models and loaders,
// parameter snapshots, metrics.csv reading, and modules and callbacks that record what the
// Trainer did.
#include <torch/torch.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "boring_model.h"
#include "volt/callbacks/callback.h"
#include "volt/callbacks/model_checkpoint.h"
#include "volt/optim/lr_scheduler.h"
#include "volt/trainer/trainer.h"

namespace volt::testing {

/// A BoringModel built from a fixed global seed (Linear init draws from the global generator).
template <class M = BoringModel, class... Args>
std::shared_ptr<M> make_model(uint64_t seed, Args&&... args) {
  torch::manual_seed(seed);
  return std::make_shared<M>(std::forward<Args>(args)...);
}

/// A ModelCheckpoint saving after every optimizer step, every file kept, and last.ckpt.
inline std::shared_ptr<ModelCheckpoint> every_step_checkpoint() {
  ModelCheckpointOptions mo;
  mo.every_n_train_steps = 1;
  mo.save_last = true;
  mo.save_top_k = -1;
  return std::make_shared<ModelCheckpoint>(mo);
}

inline DataLoader make_loader(int64_t n = 64, int64_t batch_size = 8, bool shuffle = false, uint64_t seed = 0) {
  DataLoaderOptions o;
  o.batch_size = batch_size;
  o.shuffle = shuffle;
  o.seed = seed;
  return DataLoader(std::make_shared<RandomDataset>(n), o);
}

inline std::vector<torch::Tensor> snapshot(torch::nn::Module& m) {
  std::vector<torch::Tensor> out;
  for (const auto& p : m.parameters()) out.push_back(p.detach().clone());
  return out;
}

inline bool all_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}

inline double max_abs_diff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, (a[i] - b[i]).abs().max().item<double>());
  return m;
}

inline double mean(const std::vector<double>& v, size_t begin, size_t end) {
  return std::accumulate(v.begin() + begin, v.begin() + end, 0.0) / static_cast<double>(end - begin);
}

/// metrics.csv as a header and rows of cells (empty cells kept).
struct Csv {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  int col(const std::string& name) const {
    for (size_t i = 0; i < header.size(); ++i)
      if (header[i] == name) return static_cast<int>(i);
    return -1;
  }
};
inline std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  std::string cell;
  std::stringstream ss(line);
  while (std::getline(ss, cell, ',')) out.push_back(cell);
  if (!line.empty() && line.back() == ',') out.push_back("");
  return out;
}
inline Csv read_csv(const std::string& path) {
  Csv c;
  std::ifstream in(path);
  std::string line;
  if (std::getline(in, line)) c.header = split(line);
  while (std::getline(in, line))
    if (!line.empty()) c.rows.push_back(split(line));
  return c;
}

/// The lr of the first param group at every training batch.
class LrRecorder : public Callback {
 public:
  std::string state_key() const override { return "LrRecorder"; }
  void on_train_batch_start(Trainer& t, LightningModule&, const Batch&, int64_t) override {
    lrs.push_back(t.optimizer()->param_groups()[0].options().get_lr());
  }
  std::vector<double> lrs;
};

/// Records every hook of the module in order.
class HookRecorder : public BoringModel {
 public:
  std::vector<std::string> calls;
  void configure_model() override { calls.push_back("configure_model"); }
  Optimizers configure_optimizers() override {
    calls.push_back("configure_optimizers");
    return BoringModel::configure_optimizers();
  }
  torch::Tensor training_step(const Batch& b, int64_t i) override {
    calls.push_back("training_step");
    return BoringModel::training_step(b, i);
  }
  void validation_step(const Batch& b, int64_t i) override {
    calls.push_back("validation_step");
    BoringModel::validation_step(b, i);
  }
  void on_fit_start() override { calls.push_back("on_fit_start"); }
  void on_fit_end() override { calls.push_back("on_fit_end"); }
  void on_train_start() override { calls.push_back("on_train_start"); }
  void on_train_end() override { calls.push_back("on_train_end"); }
  void on_train_epoch_start() override { calls.push_back("on_train_epoch_start"); }
  void on_train_epoch_end() override { calls.push_back("on_train_epoch_end"); }
  int on_train_batch_start(const Batch&, int64_t) override {
    calls.push_back("on_train_batch_start");
    return 0;
  }
  void on_train_batch_end(const torch::Tensor&, const Batch&, int64_t) override {
    calls.push_back("on_train_batch_end");
  }
  void on_validation_epoch_start() override { calls.push_back("on_validation_epoch_start"); }
  void on_validation_epoch_end() override { calls.push_back("on_validation_epoch_end"); }
  void on_before_backward(const torch::Tensor&) override { calls.push_back("on_before_backward"); }
  void on_after_backward() override { calls.push_back("on_after_backward"); }
  void on_before_optimizer_step(torch::optim::Optimizer&) override { calls.push_back("on_before_optimizer_step"); }
};

/// SGD with a StepLR scheduler on the given interval.
class ScheduledModel : public BoringModel {
 public:
  ScheduledModel(std::string interval, int64_t step_size, int64_t frequency = 1, double lr = 0.1)
      : interval_(std::move(interval)), step_size_(step_size), frequency_(frequency), lr_(lr) {}
  Optimizers configure_optimizers() override {
    OptimizerConfig c;
    auto opt = std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(lr_));
    c.optimizer = opt;
    c.lr_scheduler = std::make_shared<StepLR>(*opt, step_size_, 0.5);
    c.interval = interval_;
    c.frequency = frequency_;
    return c;
  }

 private:
  std::string interval_;
  int64_t step_size_, frequency_;
  double lr_;
};

}  // namespace volt::testing
