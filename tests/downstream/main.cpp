#include <volt/cli/cli.h>

#include "data.h"
#include "model.h"

int main(int argc, char** argv) {
  volt::CLI cli;
  cli.add_model<Regressor>("Regressor");
  cli.add_datamodule<SumData>("SumData");
  return cli.main(argc, argv);  // fit | validate | test | predict
}
