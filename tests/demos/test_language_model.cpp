// The demo LightningModule: options, lazy model construction, optimizers, and a short run through
// the Trainer on WikiText-2.
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>

#include "volt/core/errors.h"
#include "volt/core/options.h"
#include "volt/demos/language_model.h"
#include "volt/demos/wikitext2.h"
#include "volt/trainer/trainer.h"

using volt::demos::LanguageModel;
using volt::demos::LanguageModelOptions;

namespace {
LanguageModelOptions tiny(int64_t vocab = 50) {
  LanguageModelOptions o;
  o.vocab_size = vocab;
  o.ninp = 16;
  o.nhead = 2;
  o.nhid = 32;
  o.nlayers = 1;
  return o;
}
}  // namespace

TEST_CASE("LanguageModel: options are Lightning's defaults, flat under model:", "[demos][language_model][config]") {
  LanguageModelOptions o;
  CHECK(o.optimizer == "sgd");
  CHECK(o.lr == 0.1);
  CHECK(o.vocab_size == 33278);
  auto y = volt::options_to_yaml(o);
  for (const char* key :
       {"vocab_size", "ninp", "nhead", "nhid", "nlayers", "dropout", "optimizer", "lr", "weight_decay"})
    CHECK(y[key]);
  auto r =
      volt::options_from_yaml<LanguageModelOptions>(YAML::Load("{ninp: 32, optimizer: adamw, lr: 0.001}"), "model");
  CHECK(r.ninp == 32);
  CHECK(r.optimizer == "adamw");
  CHECK(r.lr == 0.001);
  CHECK(r.transformer().ninp == 32);
  CHECK_THROWS_WITH(volt::options_from_yaml<LanguageModelOptions>(YAML::Load("{nlayer: 3}"), "model"),
                    Catch::Contains("model.nlayer"));

  auto error_of = [](LanguageModelOptions bad) -> std::string {
    try {
      bad.validate();
    } catch (const volt::ConfigError& e) {
      return e.what();
    }
    return "";
  };
  LanguageModelOptions bad;
  bad.optimizer = "rmsprop";
  CHECK_THAT(error_of(bad), Catch::Contains("model.optimizer"));
  bad = {};
  bad.lr = 0;
  CHECK_THAT(error_of(bad), Catch::Contains("model.lr"));
  bad = {};
  bad.nhead = 7;
  CHECK_THAT(error_of(bad), Catch::Contains("model.nhead"));
  CHECK_THROWS_AS(LanguageModel(bad), volt::ConfigError);
}

TEST_CASE("LanguageModel: configure_model builds once, and names are model.*", "[demos][language_model]") {
  LanguageModel lm(tiny());
  CHECK_FALSE(lm.is_configured());
  CHECK(lm.parameters().empty());
  CHECK_THROWS_AS(lm.model(), volt::ConfigError);
  lm.configure_model();
  REQUIRE(lm.is_configured());
  const auto n = lm.parameters().size();
  auto* first = &lm.model();
  lm.configure_model();
  CHECK(&lm.model() == first);
  CHECK(lm.parameters().size() == n);
  auto names = lm.named_parameters().keys();
  CHECK(names.front() == "model.embedding.weight");
  CHECK(names.back() == "model.decoder.bias");
  CHECK(lm.named_parameters().contains("model.transformer.encoder.layers.0.self_attn.in_proj_weight"));

  auto y = lm.hparams();
  CHECK(y["ninp"].as<int64_t>() == 16);
  CHECK(y["optimizer"].as<std::string>() == "sgd");

  auto out = lm.forward(torch::zeros({2, 5}, torch::kLong), torch::ones({2, 5}, torch::kLong));
  CHECK(out.sizes().vec() == std::vector<int64_t>{10, 50});
}

TEST_CASE("LanguageModel: configure_optimizers gives SGD or AdamW", "[demos][language_model]") {
  {
    LanguageModel lm(tiny());
    lm.configure_model();
    auto cfg = lm.configure_optimizers()[0];
    auto* sgd = dynamic_cast<torch::optim::SGD*>(cfg.optimizer.get());
    REQUIRE(sgd != nullptr);
    CHECK(sgd->param_groups()[0].options().get_lr() == 0.1);
    CHECK(sgd->param_groups()[0].params().size() == lm.parameters().size());
    CHECK(cfg.lr_scheduler == nullptr);
  }
  {
    auto o = tiny();
    o.optimizer = "AdamW";
    o.lr = 1e-3;
    o.weight_decay = 0.01;
    LanguageModel lm(o);
    lm.configure_model();
    auto cfg = lm.configure_optimizers()[0];
    auto* adamw = dynamic_cast<torch::optim::AdamW*>(cfg.optimizer.get());
    REQUIRE(adamw != nullptr);
    auto& opts = static_cast<torch::optim::AdamWOptions&>(adamw->param_groups()[0].options());
    CHECK(opts.lr() == 1e-3);
    CHECK(opts.weight_decay() == 0.01);
  }
}

TEST_CASE("LanguageModel: trains, validates and tests on WikiText-2 through the Trainer",
          "[demos][language_model][trainer]") {
  const std::string dir = std::string(VOLT_SOURCE_DIR) + "/../shared/data/wikitext-2";
  if (!std::filesystem::exists(dir + "/valid.txt")) {
    WARN("WikiText-2 data not found in " << dir << ": skipped");
    return;
  }
  torch::manual_seed(0);
  auto data = std::make_shared<volt::demos::WikiText2>(dir, "valid.txt");
  volt::DataLoader train(data, {8, true, false, 42});
  volt::DataLoader val(data, {8, false, false, 0});
  LanguageModel lm(tiny(data->vocab_size()));

  volt::TrainerOptions to;
  to.max_steps = 6;
  to.limit_val_batches = volt::BatchLimit::count(2);
  to.limit_test_batches = volt::BatchLimit::count(3);
  to.val_check_interval = volt::BatchLimit::count(3);
  to.num_sanity_val_steps = 0;
  to.logger = false;
  to.enable_checkpointing = false;
  to.enable_progress_bar = false;
  to.enable_model_summary = false;
  volt::Trainer trainer(to);
  trainer.fit(lm, train, &val);
  CHECK(trainer.global_step() == 6);
  const auto& m = trainer.callback_metrics();
  REQUIRE(m.count("train_loss"));
  REQUIRE(m.count("val_loss"));
  CHECK(std::isfinite(m.at("train_loss")));
  // Untrained, the loss is about log(vocab) (~9.5); a few SGD steps must not blow it up.
  CHECK(m.at("val_loss") < std::log(static_cast<double>(data->vocab_size())) + 1.0);

  auto metrics = trainer.test(lm, val);
  REQUIRE(metrics.count("test_loss"));
  CHECK(std::isfinite(metrics.at("test_loss")));
}
