#pragma once
// A user's own classes as volt::CLI sees them: a model and a data module with options structs
// (`using Options = ...`), a second model to choose between, and a callback that records what it
// was built with. Small and fast: fit runs in well under a second.
#include <torch/torch.h>

#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "volt/callbacks/callback.h"
#include "volt/cli/cli.h"
#include "volt/core/errors.h"
#include "volt/core/options.h"
#include "volt/data/data_module.h"
#include "volt/module/lightning_module.h"

namespace volt::testing {

struct ToyNetOptions {
  int64_t hidden = 8;
  double lr = 0.05;
  int64_t inputs = 4;
  template <class V>
  void visit(V& v) {
    v("hidden", hidden)("lr", lr)("inputs", inputs);
  }
  void validate(const std::string& prefix) const {
    VOLT_CHECK(hidden >= 1, ConfigError, "config key '", prefix, ".hidden': must be >= 1, got ", hidden);
    VOLT_CHECK(inputs >= 0, ConfigError, "config key '", prefix, ".inputs': must be >= 0, got ", inputs);
  }
};

/// y = fc2(tanh(fc1(x))) against the sum of x.
class ToyNet : public LightningModule {
 public:
  using Options = ToyNetOptions;
  explicit ToyNet(const ToyNetOptions& o) : LightningModule("ToyNet"), o_(o) {
    VOLT_CHECK(o.inputs >= 1, ConfigError, "ToyNet: inputs must be >= 1 (link it from the data)");
    fc1 = register_module("fc1", torch::nn::Linear(o.inputs, o.hidden));
    fc2 = register_module("fc2", torch::nn::Linear(o.hidden, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2->forward(torch::tanh(fc1->forward(x))); }
  torch::Tensor training_step(const Batch& b, int64_t) override {
    auto loss = torch::mse_loss(forward(b[0]), b[1]);
    log("train_loss", loss);
    return loss;
  }
  void validation_step(const Batch& b, int64_t) override { log("val_loss", torch::mse_loss(forward(b[0]), b[1])); }
  void test_step(const Batch& b, int64_t) override { log("test_loss", torch::mse_loss(forward(b[0]), b[1])); }
  Batch predict_step(const Batch& b, int64_t) override { return {forward(b[0])}; }
  Optimizers configure_optimizers() override {
    return {std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(o_.lr))};
  }
  YAML::Node hparams() const override { return options_to_yaml(o_); }
  const ToyNetOptions& options() const { return o_; }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};

 private:
  ToyNetOptions o_;
};

struct OtherNetOptions {
  double scale = 1.5;
  template <class V>
  void visit(V& v) {
    v("scale", scale);
  }
};

/// A second model class: one weight, SGD.
class OtherNet : public LightningModule {
 public:
  using Options = OtherNetOptions;
  explicit OtherNet(const OtherNetOptions& o) : LightningModule("OtherNet") {
    w = register_parameter("w", torch::full({1}, o.scale));
  }
  torch::Tensor training_step(const Batch& b, int64_t) override { return torch::mse_loss(b[0].sum(1, true) * w, b[1]); }
  Optimizers configure_optimizers() override {
    return {std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.01))};
  }
  torch::Tensor w;
};

struct ToyDataOptions {
  int64_t num_samples = 32;
  int64_t batch_size = 8;
  int64_t features = 4;
  template <class V>
  void visit(V& v) {
    v("num_samples", num_samples)("batch_size", batch_size)("features", features);
  }
  /// Without a prefix (the CLI calls either form).
  void validate() const {
    VOLT_CHECK(batch_size >= 1, ConfigError, "ToyData: batch_size must be >= 1, got ", batch_size);
  }
};

class ToyDataset : public Dataset {
 public:
  ToyDataset(int64_t n, int64_t features) {
    auto gen = at::detail::createCPUGenerator(7);
    x_ = torch::randn({n, features}, gen);
    y_ = x_.sum(1, true);
  }
  int64_t size() const override { return x_.size(0); }
  Batch get(int64_t i) const override { return {x_[i], y_[i]}; }

 private:
  torch::Tensor x_, y_;
};

/// Random regression data; every stage reads the same samples.
class ToyData : public LightningDataModule {
 public:
  using Options = ToyDataOptions;
  explicit ToyData(const ToyDataOptions& o) : o_(o) {}
  void setup(const std::string&) override {
    ++setups;
    if (!data_) data_ = std::make_shared<ToyDataset>(o_.num_samples, o_.features);
  }
  std::shared_ptr<DataLoader> train_dataloader() override { return loader(true); }
  DataLoaders val_dataloader() override { return {loader(false)}; }
  DataLoaders test_dataloader() override { return {loader(false)}; }
  DataLoaders predict_dataloader() override { return {loader(false)}; }
  YAML::Node hparams() const override {
    YAML::Node n = options_to_yaml(o_);
    n["samples_seen"] = data_ ? data_->size() : 0;
    return n;
  }
  int64_t features() const { return o_.features; }
  int setups = 0;

 private:
  std::shared_ptr<DataLoader> loader(bool shuffle) {
    return std::make_shared<DataLoader>(data_, DataLoaderOptions{o_.batch_size, shuffle, false, 3});
  }
  ToyDataOptions o_;
  std::shared_ptr<ToyDataset> data_;
};

struct ProbeOptions {
  std::string tag = "none";
  int64_t every = 1;
  template <class V>
  void visit(V& v) {
    v("tag", tag)("every", every);
  }
};

/// Records the options it was built with and the batches it saw (into `log`, owned by the test).
class Probe : public Callback {
 public:
  Probe(const ProbeOptions& o, std::vector<std::string>* log) : o_(o), log_(log) { log_->push_back("built " + o.tag); }
  std::string state_key() const override { return "Probe{" + o_.tag + "}"; }
  void on_train_batch_end(Trainer&, LightningModule&, const torch::Tensor&, const Batch&, int64_t i) override {
    if (i % o_.every == 0) log_->push_back(o_.tag + " batch " + std::to_string(i));
  }

 private:
  ProbeOptions o_;
  std::vector<std::string>* log_;
};

/// A CLI with ToyNet, OtherNet (when `two_models`), ToyData and Probe registered.
inline void register_toys(CLI& cli, std::vector<std::string>* probe_log, bool two_models = true) {
  cli.add_model<ToyNet>("ToyNet");
  if (two_models) cli.add_model<OtherNet>("OtherNet");
  cli.add_datamodule<ToyData>("ToyData");
  cli.add_callback<ProbeOptions>("Probe",
                                 [probe_log](const ProbeOptions& o) { return std::make_shared<Probe>(o, probe_log); });
}

/// CLI::main on `args` (argv[0] is "toy"), with std::cout and std::cerr captured.
struct MainRun {
  int code = -1;
  std::string out, err;
};
inline MainRun run_main(CLI& cli, const std::vector<std::string>& args) {
  std::vector<std::string> all{"toy"};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::ostringstream out, err;
  auto* old_out = std::cout.rdbuf(out.rdbuf());
  auto* old_err = std::cerr.rdbuf(err.rdbuf());
  MainRun r;
  r.code = cli.main(static_cast<int>(all.size()), argv.data());
  std::cout.rdbuf(old_out);
  std::cerr.rdbuf(old_err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

}  // namespace volt::testing
