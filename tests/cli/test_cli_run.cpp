// volt::CLI running a program's own classes, in process: fit / validate / test / predict from a
// config, callbacks built from trainer.callbacks with their options, the linked argument set after
// the data module's setup, --help listing every key with its type and default, and exit codes.
#include <yaml-cpp/yaml.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "boring_model.h"
#include "cli/toy_classes.h"
#include "volt/cli/cli.h"
#include "volt/core/options_help.h"
#include "volt/trainer/trainer_options.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

std::string write_file(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

/// A quiet fit config for the toys under `dir`, with `callbacks` (YAML list) in the trainer section.
std::string toy_config(const std::string& dir, const std::string& callbacks) {
  return write_file(dir + "/toy.yaml",
                    "seed_everything: 1\n"
                    "trainer:\n"
                    "  max_epochs: 2\n"
                    "  log_every_n_steps: 1\n"
                    "  num_sanity_val_steps: 0\n"
                    "  enable_progress_bar: false\n"
                    "  enable_model_summary: false\n"
                    "  default_root_dir: " +
                        dir +
                        "\n"
                        "  callbacks: " +
                        callbacks +
                        "\n"
                        "model:\n"
                        "  class_path: ToyNet\n"
                        "  init_args: {hidden: 6}\n"
                        "data:\n"
                        "  class_path: ToyData\n"
                        "  init_args: {num_samples: 16, batch_size: 4}\n");
}

/// Every leaf key of a YAML map, dotted, with its value.
void leaves(const YAML::Node& n, const std::string& prefix, std::vector<std::pair<std::string, YAML::Node>>& out) {
  for (const auto& kv : n) {
    const std::string key = prefix + "." + kv.first.Scalar();
    if (kv.second.IsMap())
      leaves(kv.second, key, out);
    else
      out.emplace_back(key, kv.second);
  }
}

/// The help line of `--key` ("" if none).
std::string help_line(const std::string& help, const std::string& key) {
  std::istringstream in(help);
  for (std::string line; std::getline(in, line);) {
    const auto at = line.find(key + " ");
    if (at != std::string::npos && (at == 0 || line[at - 1] == ' ')) return line;
  }
  return "";
}

}  // namespace

TEST_CASE("CLI: fit builds the callbacks of trainer.callbacks with their options, then predict writes files", "[cli]") {
  const std::string dir = temp_dir("cli-classes-fit");
  std::vector<std::string> log;
  CLI cli;
  register_toys(cli, &log);
  const std::string cfg = toy_config(
      dir,
      "[{class_path: Probe, init_args: {tag: p, every: 2}}, "
      "{class_path: ModelCheckpoint, init_args: {dirpath: " +
          dir + "/ckpts, filename: 'toy-{step}', save_top_k: -1, every_n_train_steps: 4, save_last: true}}]");
  const MainRun fit = run_main(cli, {"fit", "--config", cfg});
  INFO(fit.err);
  REQUIRE(fit.code == 0);
  // Probe was built with tag p and every 2: batches 0 and 2 of each of the 2 epochs (4 batches each).
  const std::vector<std::string> expected{"built p", "p batch 0", "p batch 2", "p batch 0", "p batch 2"};
  CHECK(log == expected);
  // ModelCheckpoint with its options: every 4 steps, named toy-step=N, all kept, plus last.ckpt.
  CHECK(fs::exists(dir + "/ckpts/toy-step=4.ckpt"));
  CHECK(fs::exists(dir + "/ckpts/toy-step=8.ckpt"));
  CHECK(fs::exists(dir + "/ckpts/last.ckpt"));
  CHECK_FALSE(fs::exists(dir + "/checkpoints"));  // the configured one replaced the default
  // The resolved config is saved beside the logs.
  const YAML::Node saved = YAML::LoadFile(dir + "/lightning_logs/version_0/config.yaml");
  CHECK(saved["model"]["class_path"].as<std::string>() == "ToyNet");
  CHECK(saved["model"]["init_args"]["hidden"].as<int64_t>() == 6);
  CHECK(saved["trainer"]["callbacks"][1]["init_args"]["filename"].as<std::string>() == "toy-{step}");

  // validate and test from the last checkpoint print their metrics.
  const MainRun val = run_main(cli, {"validate", "--config", cfg, "--ckpt_path=" + dir + "/ckpts/last.ckpt"});
  INFO(val.err);
  CHECK(val.code == 0);
  CHECK_THAT(val.out, Contains("val_loss: "));
  const MainRun test = run_main(cli, {"test", "--config", cfg, "--ckpt_path", dir + "/ckpts/last.ckpt"});
  CHECK(test.code == 0);
  CHECK_THAT(test.out, Contains("test_loss: "));

  // predict with a PredictionWriter from the config: one file per batch.
  const std::string pcfg = write_file(
      dir + "/predict.yaml", "trainer: {callbacks: [{class_path: PredictionWriter, init_args: {output_dir: " + dir +
                                 "/preds, write_interval: batch}}]}\n");
  const MainRun pred =
      run_main(cli, {"predict", "--config", cfg, "--config", pcfg, "--ckpt_path=" + dir + "/ckpts/last.ckpt"});
  INFO(pred.err);
  REQUIRE(pred.code == 0);
  for (int i = 0; i < 4; ++i) {
    INFO(i);
    CHECK(fs::exists(dir + "/preds/rank_0/dataloader_0/batch_" + std::to_string(i) + ".pt"));
  }
}

TEST_CASE("CLI: an argument linked on instantiate is read from the data module after its setup", "[cli]") {
  const std::string dir = temp_dir("cli-classes-link");
  std::vector<std::string> log;
  CLI cli;
  register_toys(cli, &log);
  cli.link_arguments<ToyData>(
      "data.features", [](const ToyData& d) { return d.features(); }, "model.inputs");
  const std::string cfg = toy_config(dir, "[]");
  // ToyNet refuses inputs 0; the link makes it the data's 3 features before the model is built.
  const MainRun fit = run_main(
      cli, {"fit", "--config", cfg, "--model.init_args.inputs=0", "--data.features=3", "--trainer.max_epochs=1"});
  INFO(fit.err);
  CHECK(fit.code == 2);  // linked without a compute function: the config may not set it
  CHECK_THAT(fit.err, Contains("model.init_args.inputs") && Contains("data.features"));

  const MainRun ok = run_main(cli, {"fit", "--config", cfg, "--data.features=3", "--trainer.max_epochs=1"});
  INFO(ok.err);
  REQUIRE(ok.code == 0);
  // The refused run stopped before any log; this is the first.
  const YAML::Node saved = YAML::LoadFile(dir + "/lightning_logs/version_0/config.yaml");
  CHECK(saved["model"]["init_args"]["inputs"].as<int64_t>() == 3);  // the saved config shows the value used
  const YAML::Node hp = YAML::LoadFile(dir + "/lightning_logs/version_0/hparams.yaml");
  CHECK(hp["inputs"].as<int64_t>() == 3);

  // From hparams(): a key the data module does not have is named.
  CLI missing;
  register_toys(missing, &log);
  missing.link_arguments("data.nope", "model.inputs", Link::OnInstantiate);
  const MainRun m = run_main(missing, {"fit", "--config", cfg});
  CHECK(m.code == 2);
  CHECK_THAT(m.err, Contains("'nope'") && Contains("hparams()"));
  CLI from_hparams;
  register_toys(from_hparams, &log);
  from_hparams.link_arguments("data.samples_seen", "model.hidden", Link::OnInstantiate);
  const MainRun h = run_main(from_hparams, {"fit", "--config", cfg, "--trainer.max_epochs=1"});
  CHECK(h.code == 2);  // the config sets model.init_args.hidden (6) and the link has no compute function
  CHECK_THAT(h.err, Contains("model.init_args.hidden"));
}

TEST_CASE("CLI: exit codes: 0 done, 2 bad config or usage, 1 a failure while running", "[cli]") {
  const std::string dir = temp_dir("cli-classes-codes");
  std::vector<std::string> log;
  CLI cli;
  register_toys(cli, &log);
  const std::string cfg = toy_config(dir, "[]");
  CHECK(run_main(cli, {"fit", "--config", cfg, "--trainer.max_epochs=1"}).code == 0);
  CHECK(run_main(cli, {"fit", "--config", cfg, "--model.init_args.hiden=1"}).code == 2);
  CHECK(run_main(cli, {"fit"}).code == 2);
  CHECK(run_main(cli, {}).code == 2);
  CHECK(run_main(cli, {"train", "--config", cfg}).code == 2);
  // A missing checkpoint is a usage error, found before anything is built; a damaged one is found
  // while running.
  const MainRun r = run_main(cli, {"validate", "--config", cfg, "--ckpt_path=" + dir + "/none.ckpt"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Contains("config key 'ckpt_path'") && Contains("none.ckpt"));
  std::ofstream(dir + "/junk.ckpt") << "not a checkpoint";
  const MainRun junk = run_main(cli, {"validate", "--config", cfg, "--ckpt_path=" + dir + "/junk.ckpt"});
  CHECK(junk.code == 1);
  CHECK_THAT(junk.err, Contains("junk.ckpt"));
}

TEST_CASE("CLI --help lists every key with its type and default, and exits 0", "[cli]") {
  std::vector<std::string> log;
  CLI cli;
  register_toys(cli, &log);
  const MainRun top = run_main(cli, {"--help"});
  CHECK(top.code == 0);
  CHECK_THAT(top.out, Contains("usage: toy {fit,validate,test,predict}") && Contains("models: ToyNet, OtherNet") &&
                          Contains("data modules: ToyData") && Contains("Probe") && Contains("'toy fit --help'"));
  CHECK(run_main(cli, {"-h"}).out == top.out);
  CHECK(run_main(cli, {"help"}).out == top.out);

  for (const std::string sub : {"fit", "validate", "test", "predict"}) {
    INFO(sub);
    const MainRun r = run_main(cli, {sub, "--help"});
    CHECK(r.code == 0);
    CHECK(run_main(cli, {sub, "--config", "x.yaml", "-h"}).out == r.out);
    CHECK_THAT(r.out, Contains("usage: toy " + sub));

    // Every TrainerOptions key, with its type and its default as YAML writes it.
    std::vector<std::pair<std::string, YAML::Node>> trainer_keys;
    leaves(options_to_yaml(TrainerOptions{}), "trainer", trainer_keys);
    CHECK(trainer_keys.size() > 25);
    for (const auto& [key, value] : trainer_keys) {
      INFO(key);
      const std::string line = help_line(r.out, "--" + key);
      REQUIRE_FALSE(line.empty());
      CHECK_THAT(line, Contains("(type: "));
      if (key != "trainer.strategy.name")
        CHECK_THAT(line, Contains("default: " + volt::detail::yaml_inline(value) + ")"));
    }
    CHECK_THAT(help_line(r.out, "--trainer.max_steps"), Contains("(type: int, default: -1)"));
    CHECK_THAT(help_line(r.out, "--trainer.gradient_clip_algorithm"), Contains("(type: norm|value, default: norm)"));
    CHECK_THAT(help_line(r.out, "--trainer.gradient_clip_val"), Contains("(type: float|null, default: null)"));
    CHECK_THAT(help_line(r.out, "--trainer.limit_val_batches"), Contains("(type: int|float, default: 1.0)"));
    CHECK_THAT(help_line(r.out, "--trainer.strategy"), Contains("(type: str|map, default: auto)"));
    CHECK_THAT(help_line(r.out, "--trainer.strategy.sharding_strategy"), Contains("FULL_SHARD") && Contains("fsdp"));
    CHECK_THAT(help_line(r.out, "--trainer.callbacks"), Contains("(type: list"));
    // The registered classes' init_args, per class.
    CHECK_THAT(help_line(r.out, "--model.init_args.hidden"), Contains("(type: int, default: 8)"));
    CHECK_THAT(help_line(r.out, "--model.init_args.lr"), Contains("(type: float, default: 0.05)"));
    CHECK_THAT(help_line(r.out, "--model.init_args.scale"), Contains("(type: float, default: 1.5)"));
    CHECK_THAT(help_line(r.out, "--data.init_args.batch_size"), Contains("(type: int, default: 8)"));
    CHECK_THAT(r.out, Contains("registered: ToyNet, OtherNet"));
    // The callbacks available and their init_args.
    for (const char* c : {"ModelCheckpoint:", "EarlyStopping:", "LearningRateMonitor:", "ProgressBar:", "ModelSummary:",
                          "PredictionWriter:", "Probe:"})
      CHECK_THAT(r.out, Contains(c));
    CHECK_THAT(help_line(r.out, "init_args.patience"), Contains("(type: int, default: 3)"));
    CHECK_THAT(help_line(r.out, "init_args.write_interval"), Contains("batch|epoch|batch_and_epoch"));
    CHECK_THAT(help_line(r.out, "init_args.tag"), Contains("(type: str, default: none)"));
    // The top-level keys.
    CHECK_THAT(help_line(r.out, "--ckpt_path"), Contains("(type: str, default: \"\")"));
    CHECK_THAT(help_line(r.out, "--seed_everything"), Contains("(type: int|null, default: null)"));
  }
  const MainRun consolidate = run_main(cli, {"consolidate", "--help"});
  CHECK(consolidate.code == 0);
  CHECK_THAT(consolidate.out, Contains("usage: toy consolidate"));
}

TEST_CASE("options_help records every key of an options struct with type and default", "[cli][core]") {
  const auto h = options_help(ToyNetOptions{}, "model");
  REQUIRE(h.size() == 3);
  CHECK(h[0].key == "model.hidden");
  CHECK(h[0].type == "int");
  CHECK(h[0].default_value == "8");
  CHECK(h[1].type == "float");
  CHECK(h[1].default_value == "0.05");
  const auto t = options_help(TrainerOptions{}, "trainer");
  bool slurm = false;
  for (const auto& e : t) slurm = slurm || e.key == "trainer.slurm.requeue_signal";
  CHECK(slurm);  // nested options structs key by key
  CHECK(volt::detail::yaml_inline(YAML::Node(0.1)) == "0.1");
  CHECK(std::stod(volt::detail::yaml_inline(YAML::Node(1.0 / 3))) == 1.0 / 3);
  CHECK(volt::detail::yaml_inline(YAML::Node("")) == "\"\"");
  CHECK(volt::detail::yaml_inline(YAML::Node(YAML::NodeType::Sequence)) == "[]");
}
