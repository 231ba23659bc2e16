#pragma once
/// The demo's classes on the `volt` command line: LanguageModel as "LanguageModel" and WikiText2Data
/// as "WikiText2Data", with model.vocab_size linked to the data's vocabulary.
#include "volt/cli/cli.h"

namespace volt::demos {

/// Registers the demo's model and data module on `cli`, and the link: model.vocab_size 0 (the
/// default) takes the data's vocabulary size after its setup, a larger value is used as given, a
/// smaller one is a ConfigError naming both sizes.
void register_demo(CLI& cli);

/// A CLI with the demo registered running `command` (throws as CLI::run); for tests.
int run_cli(const cli::Command& command);

}  // namespace volt::demos
