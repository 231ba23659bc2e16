// Trainer::predict: outputs equal the module's forward, in order; every sample once; the
// PredictionWriter's files (read back as torch.load would); the errors Lightning gives.
#include <torch/serialize.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "boring_model.h"
#include "distributed/multi_rank.h"
#include "trainer/trainer_support.h"
#include "volt/callbacks/prediction_writer.h"
#include "volt/core/errors.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

/// predict_step: the forward pass, and a named field with the argmax.
class PredictModel : public BoringModel {
 public:
  Batch predict_step(const Batch& batch, int64_t) override {
    auto y = forward(batch[0]);
    Batch out{y};
    out.set("argmax", y.argmax(1));
    return out;
  }
};

class LoggingPredictModel : public BoringModel {
 public:
  Batch predict_step(const Batch& batch, int64_t) override {
    log("x", 1.0);
    return {forward(batch[0])};
  }
};

c10::Dict<c10::IValue, c10::IValue> read_dict(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return torch::pickle_load(bytes).toGenericDict();
}

}  // namespace

TEST_CASE("predict returns predict_step's outputs in order, equal to the forward pass", "[trainer][predict]") {
  auto m = make_model<PredictModel>(5);
  DataLoader loader(std::make_shared<RandomDataset>(37), DataLoaderOptions{.batch_size = 8});
  Trainer t(quiet_options(temp_dir("predict")));
  const auto outputs = t.predict(*m, loader);
  REQUIRE(outputs.size() == 5);  // 37 samples, batches of 8
  std::vector<torch::Tensor> ys;
  for (const auto& o : outputs) ys.push_back(o[0]);
  RandomDataset data(37);
  std::vector<torch::Tensor> xs;
  for (int64_t i = 0; i < 37; ++i) xs.push_back(data.get(i)[0]);
  torch::NoGradGuard ng;
  CHECK(torch::allclose(torch::cat(ys), m->forward(torch::stack(xs))));
  CHECK(torch::equal(outputs[1].at("argmax"), outputs[1][0].argmax(1)));
  CHECK(m->is_training());  // the module's mode is given back
}

TEST_CASE("predict without predict_step, or logging in it, is a ConfigError", "[trainer][predict]") {
  DataLoader loader(std::make_shared<RandomDataset>(8), DataLoaderOptions{.batch_size = 4});
  auto m = make_model(5);
  Trainer t(quiet_options(temp_dir("predict-missing")));
  CHECK_THROWS_WITH(t.predict(*m, loader), Contains("predict_step"));
  auto lm = make_model<LoggingPredictModel>(5);
  Trainer t2(quiet_options(temp_dir("predict-log")));
  CHECK_THROWS_WITH(t2.predict(*lm, loader), Contains("log('x') called in predict"));
}

TEST_CASE("PredictionWriter writes every batch and the epoch file, readable with torch.load", "[trainer][predict]") {
  const std::string root = temp_dir("predict-writer");
  PredictionWriterOptions wo;
  wo.write_interval = "batch_and_epoch";
  auto writer = std::make_shared<PredictionWriter>(wo);
  auto m = make_model<PredictModel>(5);
  DataLoaderOptions lo;
  lo.batch_size = 8;
  lo.shuffle = true;
  lo.seed = 3;
  DataLoader loader(std::make_shared<RandomDataset>(20), lo);
  Trainer t(quiet_options(root), {writer});
  const auto outputs = t.predict(*m, loader, "", /*return_predictions=*/false);
  CHECK(outputs.empty());
  const std::string dir = root + "/predictions";
  CHECK(writer->output_dir() == dir);
  std::vector<int64_t> seen;
  for (int b = 0; b < 3; ++b) {
    const auto d = read_dict(dir + "/rank_0/dataloader_0/batch_" + std::to_string(b) + ".pt");
    const auto idx = d.at("sample_indices").toTensor();
    const auto y = d.at("0").toTensor();
    CHECK(y.size(0) == idx.size(0));
    CHECK(torch::equal(d.at("argmax").toTensor(), y.argmax(1)));
    for (int64_t k = 0; k < idx.size(0); ++k) seen.push_back(idx[k].item<int64_t>());
    // Each row is the prediction of the sample it names.
    RandomDataset data(20);
    torch::NoGradGuard ng;
    CHECK(torch::allclose(y[0], m->forward(data.get(idx[0].item<int64_t>())[0].unsqueeze(0))[0]));
  }
  std::sort(seen.begin(), seen.end());
  std::vector<int64_t> all(20);
  std::iota(all.begin(), all.end(), 0);
  CHECK(seen == all);
  const auto epoch = read_dict(dir + "/rank_0.pt");
  CHECK(epoch.contains("dataloader_0/batch_2/0"));
  CHECK(epoch.contains("dataloader_0/batch_0/sample_indices"));
  CHECK_FALSE(fs::exists(dir + "/rank_0/dataloader_0/batch_3.pt"));
}

TEST_CASE("PredictionWriter: an unknown write_interval is a ConfigError naming the key", "[trainer][predict]") {
  PredictionWriterOptions wo;
  wo.write_interval = "sometimes";
  CHECK_THROWS_WITH(PredictionWriter(wo), Contains("write_interval") && Contains("batch_and_epoch"));
}

TEST_CASE("predict on 2 ranks (DDP, FSDP): every sample once, equal to the trained model's forward",
          "[trainer][predict][multirank]") {
  for (std::string strategy : {"ddp", "fsdp"}) {
    DYNAMIC_SECTION(strategy) {
      const std::string dir = temp_dir("predict-multirank");
      auto kv = quiet_worker_kv(dir);
      kv["batch_size"] = "4";
      kv["trainer.devices"] = "2";
      kv["trainer.max_steps"] = "2";
      kv["trainer.strategy"] = strategy;
      kv["predict_dir"] = dir + "/pred";
      kv["predict_samples"] = "33";  // 17 + 16 samples in batches of 4: rank 1 has one batch fewer
      REQUIRE(run_worker(args_for(dir + "/o.pt", kv), dir, 240) == 0);
      const WorkerResult r = read_worker_output(dir + "/o.pt");
      BoringModel m;
      {
        torch::NoGradGuard ng;
        for (auto& p : m.named_parameters()) p.value().copy_(r.state.at(p.key()));
      }
      m.eval();
      RandomDataset data(33, 32, 5);
      std::vector<int> count(33, 0);
      for (int rank = 0; rank < 2; ++rank) {
        const auto d = read_dict(dir + "/pred/rank_" + std::to_string(rank) + ".pt");
        for (int64_t b = 0;; ++b) {
          const std::string key = "dataloader_0/batch_" + std::to_string(b);
          if (!d.contains(key + "/0")) break;
          const auto idx = d.at(key + "/sample_indices").toTensor();
          const auto y = d.at(key + "/0").toTensor();
          for (int64_t k = 0; k < idx.size(0); ++k) {
            const int64_t s = idx[k].item<int64_t>();
            ++count[s];
            torch::NoGradGuard ng;
            CHECK(torch::allclose(y[k], m.forward(data.get(s)[0].unsqueeze(0))[0], 1e-5, 1e-6));
          }
        }
      }
      CHECK(count == std::vector<int>(33, 1));
      CHECK(no_worker_left(dir));
    }
  }
}
