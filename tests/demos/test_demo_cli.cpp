// The demo's CLI binding (demos/demo_cli.cpp): model.vocab_size unset means the data's vocabulary;
// a larger value is honoured; a smaller one is a ConfigError before any training.
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "boring_model.h"
#include "cli/cli_support.h"
#include "demos/llm/llm_data_support.h"
#include "volt/core/errors.h"
#include "volt/demos/demo_cli.h"
#include "volt/demos/wikitext2_data.h"

using namespace volt;
using Catch::Matchers::Contains;

namespace {

/// A tiny corpus in `dir`; returns its vocabulary size as the demo's data module counts it.
int64_t write_corpus(const std::string& dir) {
  std::ofstream(dir + "/train.txt") << " the cat sat on the mat \n the dog sat on the log \n"
                                       " a cat and a dog \n the end of the story \n";
  demos::WikiText2DataOptions o;
  o.data_dir = dir;
  o.train_file = "train.txt";
  o.val_file = "";
  o.test_file = "train.txt";
  return demos::WikiText2Data(o).vocab_size();
}

/// `volt fit` of a one-step run on the corpus in `dir`, with `model_vocab` as model.vocab_size
/// ("" = the key absent).
cli::Command fit_command(const std::string& dir, const std::string& model_vocab) {
  YAML::Node cfg = YAML::Load(
      "trainer: {max_steps: 1, enable_progress_bar: false, enable_model_summary: false, enable_checkpointing: false, "
      "num_sanity_val_steps: 0}\n"
      "model: {ninp: 8, nhead: 2, nhid: 8, nlayers: 1, dropout: 0.0}\n"
      "data: {train_file: train.txt, val_file: '', test_file: train.txt, block_size: 4, batch_size: 2}\n");
  cfg["trainer"]["default_root_dir"] = dir;
  cfg["data"]["data_dir"] = dir;
  if (!model_vocab.empty()) cfg["model"]["vocab_size"] = std::stoll(model_vocab);
  cli::Command c;
  c.subcommand = "fit";
  c.config = cfg;
  return c;
}

/// Runs fit_command; returns the vocab_size the model was built with (from hparams.yaml).
int64_t fit_with_vocab(const std::string& dir, const std::string& model_vocab) {
  REQUIRE(demos::run_cli(fit_command(dir, model_vocab)) == 0);
  const std::string version = dir + "/lightning_logs/version_0";
  // The saved config shows the size used, as the model's hyperparameters do.
  CHECK(YAML::LoadFile(version + "/config.yaml")["model"]["init_args"]["vocab_size"].as<int64_t>() ==
        YAML::LoadFile(version + "/hparams.yaml")["vocab_size"].as<int64_t>());
  return YAML::LoadFile(version + "/hparams.yaml")["vocab_size"].as<int64_t>();
}

/// The ConfigError message of fit_command's run ("" if none was thrown).
std::string config_error_of(const std::string& dir, const std::string& model_vocab) {
  try {
    demos::run_cli(fit_command(dir, model_vocab));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("demo CLI: model.vocab_size unset takes the data's vocabulary, a larger one is honoured",
          "[demos][cli][vocab]") {
  const std::string dir = testing::temp_dir("demo-vocab");
  const int64_t data_vocab = write_corpus(dir);
  REQUIRE(data_vocab > 10);
  SECTION("absent") { CHECK(fit_with_vocab(dir, "") == data_vocab); }
  SECTION("0") { CHECK(fit_with_vocab(dir, "0") == data_vocab); }
  SECTION("equal") { CHECK(fit_with_vocab(dir, std::to_string(data_vocab)) == data_vocab); }
  SECTION("larger") { CHECK(fit_with_vocab(dir, std::to_string(data_vocab + 50)) == data_vocab + 50); }
}

TEST_CASE("demo CLI: model.vocab_size smaller than the data's vocabulary is a ConfigError naming both",
          "[demos][cli][vocab]") {
  const std::string dir = testing::temp_dir("demo-vocab-small");
  const int64_t data_vocab = write_corpus(dir);
  const std::string msg = config_error_of(dir, std::to_string(data_vocab - 1));
  CHECK_THAT(msg, Contains("model.vocab_size") && Contains(std::to_string(data_vocab - 1)) &&
                      Contains("(" + std::to_string(data_vocab) + " tokens)") && Contains("remove the key"));
  CHECK_FALSE(std::filesystem::exists(dir + "/lightning_logs/version_0/metrics.csv"));  // nothing trained

  const std::string negative = config_error_of(dir, "-3");
  CHECK_THAT(negative, Contains("model.vocab_size") && Contains(">= 0"));
}

TEST_CASE("demo CLI: LlamaLM's max_position_embeddings shorter than data.block_size is refused before any work",
          "[demos][cli][llm]") {
  const std::string dir = testing::temp_dir("demo-positions");
  auto command = [&](int64_t positions) {
    YAML::Node cfg = YAML::Load(
        "trainer: {max_steps: 1, enable_progress_bar: false, enable_model_summary: false, enable_checkpointing: "
        "false, num_sanity_val_steps: 0}\n"
        "model: {class_path: LlamaLM, init_args: {hidden_size: 16, num_hidden_layers: 1, num_attention_heads: 2, "
        "intermediate_size: 32}}\n"
        "data: {class_path: TokenData, init_args: {train_file: small.txt, val_file: '', test_file: small.txt, "
        "tokenizer_vocab_size: 400, block_size: 16, batch_size: 2}}\n");
    cfg["trainer"]["default_root_dir"] = dir;
    cfg["model"]["init_args"]["max_position_embeddings"] = positions;
    cfg["data"]["init_args"]["data_dir"] = testing::small_fixture();
    cfg["data"]["init_args"]["cache_dir"] = dir + "/cache";
    cli::Command c;
    c.subcommand = "fit";
    c.config = cfg;
    return c;
  };
  try {
    demos::run_cli(command(15));
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Contains("config key 'model.init_args.max_position_embeddings': 15 is shorter than "
                                  "data.block_size (16 tokens a sample)"));
  }
  CHECK_FALSE(std::filesystem::exists(dir + "/lightning_logs"));  // before the Trainer's set-up
  CHECK_FALSE(std::filesystem::exists(dir + "/cache"));           // and before the data is prepared
  CHECK(demos::run_cli(command(16)) == 0);
}

TEST_CASE("demo CLI: predict writes next tokens and target log-probabilities whose mean is the test loss",
          "[demos][cli][predict]") {
  const std::string dir = testing::temp_dir("demo-predict");
  write_corpus(dir);
  cli::Command fit = fit_command(dir, "");
  fit.config["trainer"]["enable_checkpointing"] = true;
  REQUIRE(demos::run_cli(fit) == 0);
  // test, then predict with a PredictionWriter, from the fit's checkpoint, logging under eval/.
  cli::Command test = fit_command(dir, "");
  test.subcommand = "test";
  test.config["trainer"]["default_root_dir"] = dir + "/eval";
  test.config["ckpt_path"] = dir + "/checkpoints/last.ckpt";
  cli::Command predict = test;
  predict.config = YAML::Clone(test.config);
  predict.subcommand = "predict";
  predict.config["trainer"]["callbacks"] =
      YAML::Load("[{class_path: PredictionWriter, init_args: {write_interval: epoch}}]");
  REQUIRE(demos::run_cli(test) == 0);
  REQUIRE(demos::run_cli(predict) == 0);

  std::ifstream in(dir + "/eval/predictions/rank_0.pt", std::ios::binary);
  REQUIRE(in.good());
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto d = torch::pickle_load(bytes).toGenericDict();
  // test_loss is the batches' mean nll averaged with weights = batch size (Lightning's rule).
  double weighted = 0, samples = 0;
  int64_t batches = 0;
  for (;; ++batches) {
    const std::string key = "dataloader_0/batch_" + std::to_string(batches) + "/";
    if (!d.contains(key + "target_log_prob")) break;
    const auto lp = d.at(key + "target_log_prob").toTensor();
    CHECK(d.at(key + "next_token").toTensor().sizes() == lp.sizes());
    CHECK((lp <= 0).all().item<bool>());
    weighted += -lp.mean().item<double>() * static_cast<double>(lp.size(0));
    samples += static_cast<double>(lp.size(0));
  }
  REQUIRE(batches > 0);
  const double mean = weighted / samples;
  const auto test_loss = testing::metrics_column(dir + "/eval/lightning_logs/version_0/metrics.csv", "test_loss");
  REQUIRE(test_loss.size() == 1);
  CHECK(test_loss[0] == Approx(mean).epsilon(1e-5));
}
