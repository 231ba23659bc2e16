// The `volt` command: the CLI with the demo's LanguageModel and WikiText2Data registered.
#include "volt/cli/cli.h"
#include "volt/demos/demo_cli.h"

int main(int argc, char** argv) {
  volt::CLI cli;
  volt::demos::register_demo(cli);
  return cli.main(argc, argv);
}
