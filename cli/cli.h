#pragma once
/// The `volt` command line, LightningCLI style:
///   volt fit|validate|test --config configs/X.yaml [--trainer.max_steps=20 ...] [--print_config]
/// Config sections: trainer, model, data, ckpt_path, seed_everything. Unknown keys, wrong types and
/// out-of-range values are ConfigErrors naming the key, raised before any work starts.
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace volt::cli {

/// Runs the CLI; returns the process exit code (0 ok, 1 runtime failure, 2 bad config/usage).
/// Errors are printed to stderr. Never calls exit().
int run(int argc, char** argv);

/// Loads a config file and applies `--a.b=value` overrides. Throws ConfigError.
YAML::Node load_config(const std::string& path, const std::vector<std::string>& overrides);

}  // namespace volt::cli
