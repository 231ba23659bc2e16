// End-to-end runs of the `volt` command (the built binary, VOLT_CLI) on configs/tiny.yaml: training
// works and the loss goes down, the log directory holds what Lightning's CSVLogger and LightningCLI
// write, --print_config round-trips, bad configs fail before any work, validate and test run.
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "boring_model.h"

using namespace volt::testing;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

const std::string kSource = VOLT_SOURCE_DIR;
const std::string kDataDir = kSource + "/../shared/data/wikitext-2";
const std::string kTiny = kSource + "/configs/tiny.yaml";

bool have_data() {
  if (fs::exists(kDataDir + "/valid.txt") && fs::exists(kDataDir + "/test.txt")) return true;
  WARN("WikiText-2 data not found in " << kDataDir << ": skipped");
  return false;
}

struct CliRun {
  int code = -1;
  std::string output;  // stdout and stderr together
};

/// Runs `volt <args...>` with its output in `<dir>/cli.<n>.0.log`.
CliRun run_cli(const std::vector<std::string>& args, const std::string& dir, int timeout_s = 300) {
  static int n = 0;
  std::vector<std::string> argv{VOLT_CLI};
  argv.insert(argv.end(), args.begin(), args.end());
  const std::string prefix = dir + "/cli." + std::to_string(n++);
  CliRun r;
  r.code = run_processes({argv}, {{}}, timeout_s, prefix)[0];
  r.output = read_text(prefix + ".0.log");
  return r;
}

/// `sub --config tiny.yaml` writing under `root`, reading the offline data, quiet.
std::vector<std::string> tiny_args(const std::string& sub, const std::string& root,
                                   const std::vector<std::string>& extra = {}) {
  std::vector<std::string> a{sub,
                             "--config",
                             kTiny,
                             "--trainer.default_root_dir=" + root,
                             "--data.data_dir=" + kDataDir,
                             "--trainer.enable_progress_bar=false"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> out;
  std::string cell;
  std::stringstream ss(line);
  while (std::getline(ss, cell, ',')) out.push_back(cell);
  if (!line.empty() && line.back() == ',') out.push_back("");
  return out;
}

struct Csv {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  int col(const std::string& name) const {
    auto it = std::find(header.begin(), header.end(), name);
    return it == header.end() ? -1 : static_cast<int>(it - header.begin());
  }
  /// (step, value) of the rows where `name` is set.
  std::vector<std::pair<int64_t, double>> series(const std::string& name) const {
    std::vector<std::pair<int64_t, double>> out;
    const int c = col(name), s = col("step");
    if (c < 0 || s < 0) return out;
    for (const auto& r : rows)
      if (c < static_cast<int>(r.size()) && !r[c].empty()) out.emplace_back(std::stoll(r[s]), std::stod(r[c]));
    return out;
  }
};

Csv read_csv(const std::string& path) {
  Csv c;
  std::ifstream in(path);
  std::string line;
  if (std::getline(in, line)) c.header = split_csv_line(line);
  while (std::getline(in, line))
    if (!line.empty()) c.rows.push_back(split_csv_line(line));
  return c;
}

bool is_integer(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
}

/// The number printed after "<name>: " in a validate/test run's output.
double printed_metric(const std::string& output, const std::string& name) {
  const auto at = output.find(name + ": ");
  REQUIRE(at != std::string::npos);
  return std::stod(output.substr(at + name.size() + 2));
}

}  // namespace

TEST_CASE("volt fit on the tiny config trains, logs as Lightning and validates from last.ckpt", "[cli][e2e]") {
  if (!have_data()) return;
  const std::string root = temp_dir("cli-fit");
  const auto fit = run_cli(tiny_args("fit", root, {"--trainer.max_steps=20"}), root);
  INFO(fit.output);
  REQUIRE(fit.code == 0);

  const std::string version = root + "/lightning_logs/version_0";
  REQUIRE(fs::is_directory(version));
  CHECK_FALSE(fs::exists(root + "/lightning_logs/version_1"));

  // One fit, several checks (no SECTIONs: each would train again).
  {  // metrics.csv is Lightning's CSVLogger layout and the loss goes down
    const Csv csv = read_csv(version + "/metrics.csv");
    // Sorted header with Lightning's step and epoch columns; one cell per column in every row.
    CHECK(csv.header == std::vector<std::string>{"epoch", "step", "train_loss", "val_loss"});
    CHECK(std::is_sorted(csv.header.begin(), csv.header.end()));
    REQUIRE_FALSE(csv.rows.empty());
    int64_t last_step = -1;
    for (const auto& r : csv.rows) {
      REQUIRE(r.size() == csv.header.size());
      CHECK(r[csv.col("epoch")] == "0");  // one epoch: limit_train_batches 20 = max_steps 20
      REQUIRE(is_integer(r[csv.col("step")]));
      const int64_t step = std::stoll(r[csv.col("step")]);
      CHECK(step >= last_step);  // rows in step order
      last_step = step;
      // A row holds either a training step or a validation epoch, never both.
      CHECK(r[csv.col("train_loss")].empty() != r[csv.col("val_loss")].empty());
    }
    // log_every_n_steps 5: rows at steps 4, 9, 14, 19 (Lightning logs when (step + 1) % n == 0).
    const auto train = csv.series("train_loss");
    std::vector<int64_t> train_steps;
    for (auto& [s, v] : train) train_steps.push_back(s);
    CHECK(train_steps == std::vector<int64_t>{4, 9, 14, 19});
    // val_check_interval 10: validation after steps 10 and 20, logged at steps 9 and 19.
    const auto val = csv.series("val_loss");
    std::vector<int64_t> val_steps;
    for (auto& [s, v] : val) val_steps.push_back(s);
    CHECK(val_steps == std::vector<int64_t>{9, 19});
    REQUIRE(train.size() == 4);
    REQUIRE(val.size() == 2);
    for (auto& [s, v] : train) CHECK(std::isfinite(v));
    CHECK(train.back().second < train.front().second - 0.1);
    CHECK(val.back().second < val.front().second);
  }

  {  // config.yaml is the resolved config and hparams.yaml the model's hyperparameters
    REQUIRE(fs::exists(version + "/config.yaml"));
    REQUIRE(fs::exists(version + "/hparams.yaml"));
    const YAML::Node cfg = YAML::LoadFile(version + "/config.yaml");
    for (const char* section : {"trainer", "model", "data", "seed_everything"}) {
      INFO(section);
      CHECK(cfg[section].IsDefined());
    }
    CHECK(cfg["trainer"]["max_steps"].as<int64_t>() == 20);
    CHECK(cfg["trainer"]["default_root_dir"].as<std::string>() == root);
    CHECK(cfg["model"]["class_path"].as<std::string>() == "LanguageModel");
    CHECK(cfg["data"]["class_path"].as<std::string>() == "WikiText2Data");
    CHECK(cfg["data"]["init_args"]["data_dir"].as<std::string>() == kDataDir);
    // model.vocab_size 0 was linked to the data's vocabulary: the saved config shows the size used.
    CHECK(cfg["model"]["init_args"]["vocab_size"].as<int64_t>() ==
          YAML::LoadFile(version + "/hparams.yaml")["vocab_size"].as<int64_t>());
    CHECK(cfg["seed_everything"].as<int64_t>() == 42);
    const YAML::Node hp = YAML::LoadFile(version + "/hparams.yaml");
    CHECK(hp["ninp"].as<int64_t>() == 32);
    CHECK(hp["nlayers"].as<int64_t>() == 1);
    CHECK(hp["vocab_size"].as<int64_t>() > 0);
  }

  {  // checkpoints are written; validate and test run from ckpt_path=last
    CHECK(fs::exists(root + "/checkpoints/last.ckpt"));
    CHECK(fs::exists(root + "/checkpoints/epoch=0-step=20.ckpt"));
    const double fit_val = read_csv(version + "/metrics.csv").series("val_loss").back().second;

    const auto val = run_cli(tiny_args("validate", root, {"--ckpt_path=last"}), root);
    INFO(val.output);
    REQUIRE(val.code == 0);
    // The restored model is the trained one: the same val_loss as the last validation of fit.
    CHECK(printed_metric(val.output, "val_loss") == Approx(fit_val).epsilon(1e-4));
    const Csv vcsv = read_csv(root + "/lightning_logs/version_1/metrics.csv");
    CHECK(vcsv.header == std::vector<std::string>{"epoch", "step", "val_loss"});
    CHECK(vcsv.rows.size() == 1);

    const auto test = run_cli(
        tiny_args("test", root, {"--ckpt_path", root + "/checkpoints/last.ckpt", "--trainer.limit_test_batches=3"}),
        root);
    INFO(test.output);
    REQUIRE(test.code == 0);
    const double test_loss = printed_metric(test.output, "test_loss");
    CHECK(std::isfinite(test_loss));
    CHECK(test_loss < read_csv(version + "/metrics.csv").series("train_loss").front().second);
    const Csv tcsv = read_csv(root + "/lightning_logs/version_2/metrics.csv");
    CHECK(tcsv.header == std::vector<std::string>{"epoch", "step", "test_loss"});
    // One log version per run (fit, validate, test), nothing else.
    CHECK_FALSE(fs::exists(root + "/lightning_logs/version_3"));
  }
}

TEST_CASE("volt validate and test run on an untrained model without a checkpoint", "[cli][e2e]") {
  if (!have_data()) return;
  const std::string root = temp_dir("cli-eval");
  const auto val = run_cli(tiny_args("validate", root), root);
  INFO(val.output);
  CHECK(val.code == 0);
  CHECK(std::isfinite(printed_metric(val.output, "val_loss")));
  const auto test = run_cli(tiny_args("test", root, {"--trainer.limit_test_batches=2"}), root);
  INFO(test.output);
  CHECK(test.code == 0);
  CHECK(std::isfinite(printed_metric(test.output, "test_loss")));
  CHECK_FALSE(fs::exists(root + "/checkpoints"));  // no fit, no checkpoint
}

TEST_CASE("volt fit --print_config prints YAML that parses back and does not train", "[cli][e2e]") {
  const std::string root = temp_dir("cli-print");
  // Needs no data: nothing is loaded before the config is printed.
  const auto r = run_cli({"fit", "--config", kTiny, "--trainer.default_root_dir=" + root, "--trainer.max_steps=7",
                          "--model.nhid=48", "--print_config"},
                         root);
  INFO(r.output);
  REQUIRE(r.code == 0);
  YAML::Node cfg;
  REQUIRE_NOTHROW(cfg = YAML::Load(r.output));
  REQUIRE(cfg.IsMap());
  CHECK(cfg["trainer"]["max_steps"].as<int64_t>() == 7);
  CHECK(cfg["trainer"]["log_every_n_steps"].as<int64_t>() == 5);                 // from tiny.yaml
  CHECK(cfg["trainer"]["gradient_clip_algorithm"].as<std::string>() == "norm");  // a default filled in
  CHECK(cfg["model"]["class_path"].as<std::string>() == "LanguageModel");
  CHECK(cfg["model"]["init_args"]["nhid"].as<int64_t>() == 48);
  CHECK(cfg["model"]["init_args"]["vocab_size"].as<int64_t>() == 0);  // the data's, once it is loaded
  CHECK(cfg["data"]["class_path"].as<std::string>() == "WikiText2Data");
  CHECK(cfg["data"]["init_args"]["block_size"].as<int64_t>() == 16);
  CHECK(cfg["trainer"]["callbacks"].IsSequence());
  CHECK(cfg["seed_everything"].as<int64_t>() == 42);
  CHECK_FALSE(fs::exists(root + "/lightning_logs"));
  CHECK_FALSE(fs::exists(root + "/checkpoints"));

  // The printed config is a valid config: fed back, it prints the same thing.
  const std::string saved = root + "/printed.yaml";
  std::ofstream(saved) << r.output;
  const auto again = run_cli({"fit", "--config", saved, "--print_config"}, root);
  INFO(again.output);
  REQUIRE(again.code == 0);
  CHECK(YAML::Dump(YAML::Load(again.output)) == YAML::Dump(cfg));
}

TEST_CASE("volt rejects bad configs naming the key, before any work", "[cli][e2e][config]") {
  struct Bad {
    std::string arg;
    std::string key;
  };
  for (const auto& b : {Bad{"--trainer.foo=1", "trainer.foo"}, Bad{"--trainer.max_steps=abc", "trainer.max_steps"},
                        Bad{"--trainer.max_steps=-5", "trainer.max_steps"},
                        Bad{"--trainer.log_every_n_steps=0", "trainer.log_every_n_steps"},
                        Bad{"--data.batch_size=0", "data.batch_size"}, Bad{"--model.nope=3", "model.nope"},
                        Bad{"--trainer.precision=64-fancy", "trainer.precision"}}) {
    INFO(b.arg);
    const std::string root = temp_dir("cli-bad");
    const auto r = run_cli(tiny_args("fit", root, {b.arg}), root);
    INFO(r.output);
    CHECK(r.code != 0);
    CHECK(r.code != -1);  // failed by itself, at once
    CHECK_THAT(r.output, Contains(b.key));
    CHECK_FALSE(fs::exists(root + "/lightning_logs"));
    CHECK_FALSE(fs::exists(root + "/checkpoints"));
  }
  // Usage errors: unknown subcommand, missing config file.
  const std::string root = temp_dir("cli-usage");
  const auto sub = run_cli({"train", "--config", kTiny}, root);
  CHECK(sub.code != 0);
  CHECK_THAT(sub.output, Contains("train"));
  const auto missing = run_cli({"fit", "--config", root + "/nope.yaml"}, root);
  CHECK(missing.code != 0);
  CHECK_THAT(missing.output, Contains(root + "/nope.yaml"));
}
