#include "volt/cli/cli.h"
#include "volt/demos/demo_cli.h"

int main(int argc, char** argv) { return volt::cli::run(argc, argv, volt::demos::run_cli); }
