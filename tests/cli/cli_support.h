#pragma once
// Runs the `volt` CLI (VOLT_CLI) on configs/tiny.yaml: the demo Transformer on the shipped
// WikiText-2, for tests that compare whole training runs of the demo across strategies.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "boring_model.h"

namespace volt::testing {

inline std::string demo_data_dir() { return std::string(VOLT_SOURCE_DIR) + "/../shared/data/wikitext-2"; }
inline bool have_demo_data() { return std::filesystem::exists(demo_data_dir() + "/valid.txt"); }

/// A metrics.csv column: every non-empty value, in row order.
inline std::vector<double> metrics_column(const std::string& csv, const std::string& name) {
  std::ifstream in(csv);
  std::string header, line;
  std::getline(in, header);
  std::vector<std::string> cols;
  std::stringstream hs(header);
  for (std::string c; std::getline(hs, c, ',');) cols.push_back(c);
  const auto col = std::find(cols.begin(), cols.end(), name) - cols.begin();
  std::vector<double> out;
  while (std::getline(in, line)) {
    std::stringstream ls(line);
    std::string cell;
    for (long i = 0; std::getline(ls, cell, ','); ++i)
      if (i == col && !cell.empty()) out.push_back(std::stod(cell));
  }
  return out;
}

/// `volt fit` of configs/tiny.yaml under `dir` with `overrides` ("--key=value", later ones win),
/// logging every step, no validation unless overridden; returns metrics.csv (REQUIREs a clean exit).
inline std::string demo_fit(const std::string& dir, const std::vector<std::string>& overrides) {
  std::vector<std::string> argv = {VOLT_CLI,
                                   "fit",
                                   "--config",
                                   std::string(VOLT_SOURCE_DIR) + "/configs/tiny.yaml",
                                   "--trainer.log_every_n_steps=1",
                                   "--trainer.limit_val_batches=0",
                                   "--trainer.num_sanity_val_steps=0",
                                   "--trainer.enable_progress_bar=false",
                                   "--trainer.enable_checkpointing=false",
                                   "--trainer.default_root_dir=" + dir,
                                   "--data.data_dir=" + demo_data_dir()};
  argv.insert(argv.end(), overrides.begin(), overrides.end());
  auto codes = run_processes({argv}, {{}}, 300, dir + "/cli");
  INFO(read_text(dir + "/cli.0.log"));
  REQUIRE(codes[0] == 0);
  return dir + "/lightning_logs/version_0/metrics.csv";
}

/// Rank 0's train_loss of every step of such a run.
inline std::vector<double> demo_train_losses(const std::string& dir, const std::vector<std::string>& overrides) {
  return metrics_column(demo_fit(dir, overrides), "train_loss");
}

}  // namespace volt::testing
