#pragma once
/// Pieces of the CLI's help text shared by cli.cpp and cli_help.cpp. Internal to cli/.
#include <string>
#include <vector>

#include "volt/core/options_help.h"

namespace volt::detail {

/// fit, validate, test, predict.
const std::vector<std::string>& run_subcommands();
bool is_run_subcommand(const std::string& name);
/// The usage lines of every subcommand.
std::string cli_usage(const std::string& program);
/// The trainer section's keys: TrainerOptions' visit(), with trainer.strategy's name and the keys of
/// each strategy spelled out (its YAML codec takes a name or a map), and trainer.callbacks.
std::vector<OptionHelp> trainer_help();

}  // namespace volt::detail
