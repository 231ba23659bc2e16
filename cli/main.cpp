#include "volt/cli/cli.h"

int main(int argc, char** argv) { return volt::cli::run(argc, argv); }
