#pragma once
#include <volt/volt.h>

struct SumDataOptions {
  int64_t num_samples = 256;
  int64_t batch_size = 32;
  int64_t seed = 0;

  template <class V>
  void visit(V& v) {
    v("num_samples", num_samples)("batch_size", batch_size)("seed", seed);
  }
};

// Samples by index: x has 8 normal features, y is their sum. The same seed gives the same samples
// on every rank.
class SumDataset : public volt::Dataset {
 public:
  SumDataset(int64_t size, int64_t seed) {
    auto generator = at::detail::createCPUGenerator(static_cast<uint64_t>(seed));
    x_ = torch::randn({size, 8}, generator);
    y_ = x_.sum(/*dim=*/1, /*keepdim=*/true);
  }
  int64_t size() const override { return x_.size(0); }
  volt::Batch get(int64_t i) const override { return {x_[i], y_[i]}; }

 private:
  torch::Tensor x_, y_;
};

// The data module: how to get the data (prepare_data, on rank 0: nothing to download here), how to
// split it (setup, on every rank) and the loaders of each stage.
class SumData : public volt::LightningDataModule {
 public:
  using Options = SumDataOptions;

  explicit SumData(const SumDataOptions& options) : options_(options) {}
  void setup(const std::string& stage) override {
    train_ = std::make_shared<SumDataset>(options_.num_samples, options_.seed);
    val_ = std::make_shared<SumDataset>(options_.num_samples / 4, options_.seed + 1);
  }
  std::shared_ptr<volt::DataLoader> train_dataloader() override {
    return std::make_shared<volt::DataLoader>(train_, volt::DataLoaderOptions{options_.batch_size, /*shuffle=*/true});
  }
  volt::DataLoaders val_dataloader() override { return {in_order(val_)}; }
  volt::DataLoaders predict_dataloader() override { return {in_order(val_)}; }

 private:
  std::shared_ptr<volt::DataLoader> in_order(std::shared_ptr<SumDataset> split) const {
    return std::make_shared<volt::DataLoader>(split, volt::DataLoaderOptions{options_.batch_size});
  }
  SumDataOptions options_;
  std::shared_ptr<SumDataset> train_, val_;
};
