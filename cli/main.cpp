// The `volt` command: the CLI with the demos registered (LanguageModel and WikiText2Data, the
// default classes; LlamaLM and TokenData; `volt generate`).
#include "volt/cli/cli.h"
#include "volt/core/malloc_tuning.h"
#include "volt/demos/demo_cli.h"

int main(int argc, char** argv) {
  volt::tune_malloc_for_training();
  volt::CLI cli;
  volt::demos::register_demo(cli);
  return cli.main(argc, argv);
}
