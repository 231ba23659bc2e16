#include "demos/llm/llama_parity_worker.h"

#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <fstream>
#include <iostream>

#include "volt/checkpoint/safetensors.h"
#include "volt/checkpoint/torch_save.h"
#include "volt/checkpoint/weights.h"
#include "volt/core/errors.h"
#include "volt/core/options.h"
#include "volt/demos/llm/llama_lm.h"
#include "volt/trainer/trainer.h"

namespace volt::testing {

namespace {

/// Row r of the fixed global batches [steps, batch, block]: sample s * batch + r of step s.
class FixedBatches : public Dataset {
 public:
  explicit FixedBatches(const std::string& path) {
    TorchSaveReader r(path);
    ids_ = r.read("input_ids");
    labels_ = r.read("labels");
    VOLT_CHECK(ids_.dim() == 3 && ids_.sizes() == labels_.sizes(), DataError, path,
               ": input_ids and labels must be [steps, batch, block], got ", ids_.sizes(), " and ", labels_.sizes());
    ids_ = ids_.flatten(0, 1);
    labels_ = labels_.flatten(0, 1);
  }
  int64_t size() const override { return ids_.size(0); }
  Batch get(int64_t i) const override {
    Batch b;
    b.set("input_ids", ids_[i]);
    b.set("labels", labels_[i]);
    return b;
  }

 private:
  torch::Tensor ids_, labels_;
};

/// Each step's loss averaged over ranks: the global batch's mean token loss (equal tokens per rank).
class LossRecorder : public Callback {
 public:
  std::string state_key() const override { return "LlamaLossRecorder"; }
  void on_train_batch_end(Trainer& t, LightningModule&, const torch::Tensor& loss, const Batch&, int64_t) override {
    losses.push_back(t.strategy().all_reduce(loss.detach().to(torch::kDouble), ReduceOp::Mean).item<double>());
  }
  std::vector<double> losses;
};

}  // namespace

int run_llama_parity(const std::string& config_path) {
  try {
    const YAML::Node root = YAML::LoadFile(config_path);
    const std::string dir = root["dir"].as<std::string>(), tag = root["tag"].as<std::string>();
    const auto mopt = options_from_yaml<demos::LlamaLMOptions>(root["model"], "model");
    const auto topt = options_from_yaml<TrainerOptions>(root["trainer"], "trainer");
    torch::set_num_threads(1);

    demos::LlamaLM model(mopt);
    model.configure_model();  // built whole on every rank; FSDP's auto_wrap_policy picks the layers
    load_weights(model, dir + "/init.pt");

    auto data = std::make_shared<FixedBatches>(dir + "/batches.pt");
    const int64_t global_batch = TorchSaveReader(dir + "/batches.pt").info("input_ids").shape.at(1);
    VOLT_CHECK(global_batch % topt.devices == 0, ConfigError, "the global batch ", global_batch,
               " does not split over ", topt.devices, " ranks");
    DataLoaderOptions lo;
    lo.batch_size = global_batch / topt.devices;
    DataLoader loader(data, lo);

    auto recorder = std::make_shared<LossRecorder>();
    Trainer trainer(topt, {recorder});
    trainer.fit(model, loader);
    const auto state = trainer.strategy().model_state_dict(model);
    if (trainer.is_global_zero()) {
      std::ofstream out(dir + "/" + tag + ".losses");
      char line[64];
      for (double l : recorder->losses) {
        std::snprintf(line, sizeof line, "%.17g\n", l);
        out << line;
      }
      save_safetensors(state, dir + "/" + tag + ".safetensors", {{"format", "pt"}});
    }
    trainer.wait_for_ranks();
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "llama_parity: error: " << e.what() << std::endl;
    return 1;
  }
}

}  // namespace volt::testing
