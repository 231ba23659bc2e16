#pragma once
/// The `volt` command line, LightningCLI style:
///   volt fit|validate|test --config configs/X.yaml [--trainer.max_steps=20 ...] [--print_config]
/// Config sections: trainer, model, data, ckpt_path, seed_everything. Unknown keys, wrong types and
/// out-of-range values are ConfigErrors naming the key, raised before any work starts.
#include <yaml-cpp/yaml.h>

#include <functional>
#include <string>
#include <vector>

namespace volt::cli {

/// One parsed invocation of fit / validate / test: the subcommand and the merged config (files and
/// `--key=value` overrides), not yet mapped onto options.
struct Command {
  std::string subcommand;
  YAML::Node config;
  bool print_config = false;
};

/// What a program does with a Command (maps the config onto its model and data, runs the Trainer);
/// returns the exit code. Throws ConfigError for bad configs.
using App = std::function<int(const Command&)>;

/// Runs the CLI (`consolidate` itself, the rest through `app`); returns the process exit code (0 ok,
/// 1 runtime failure, 2 bad config/usage). Errors are printed to stderr. Never calls exit().
int run(int argc, char** argv, const App& app);

/// Loads config files, merged in order (maps key by key, later files win, as LightningCLI), and
/// applies `--a.b=value` overrides. A key given twice in one file, a folder or an unreadable file
/// is a ConfigError naming the file.
YAML::Node load_configs(const std::vector<std::string>& paths, const std::vector<std::string>& overrides);
/// load_configs with one file ("" = none).
YAML::Node load_config(const std::string& path, const std::vector<std::string>& overrides);

}  // namespace volt::cli
