#pragma once
/// The demo's binding to the `volt` command line: the config sections `model` (LanguageModelOptions)
/// and `data` (WikiText2DataOptions) beside `trainer`, `ckpt_path` and `seed_everything`.
#include "volt/cli/cli.h"

namespace volt::demos {

/// Maps `command.config` onto the demo's options and runs the subcommand; returns the exit code.
int run_cli(const cli::Command& command);

}  // namespace volt::demos
