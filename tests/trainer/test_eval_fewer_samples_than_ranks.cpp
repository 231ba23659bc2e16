// Validation on 2 ranks of 1 sample: rank 1 only runs a stand-in batch and logs nothing real, yet
// both ranks reduce the same sync_dist names at the end of the epoch (a rank skipping them left the
// other waiting in an all-reduce), and val_loss is that one sample's loss.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "boring_model.h"
#include "distributed/multi_rank.h"

using namespace volt;
using namespace volt::testing;

TEST_CASE("validation on 2 ranks of 1 sample ends on both ranks with that sample's val_loss",
          "[trainer][validation][multirank]") {
  const std::string dir = temp_dir("val-one-sample");
  auto kv = quiet_worker_kv(dir);
  kv["samples"] = "2";  // the worker validates on samples / 2 = 1
  kv["batch_size"] = "4";
  kv["trainer.devices"] = "2";
  kv["trainer.max_epochs"] = "2";
  kv["trainer.strategy"] = "ddp";
  REQUIRE(run_worker(args_for(dir + "/o.pt", kv), dir, 120) == 0);
  const WorkerResult r = read_worker_output(dir + "/o.pt");
  BoringModel m;
  {
    torch::NoGradGuard ng;
    for (auto& p : m.named_parameters()) p.value().copy_(r.state.at(p.key()));
  }
  m.eval();
  RandomDataset val(1, 32, 99);
  torch::NoGradGuard ng;
  const auto out = m.forward(val.get(0)[0].unsqueeze(0));
  CHECK(r.val_loss == Approx(torch::mse_loss(out, torch::ones_like(out)).item<double>()).epsilon(1e-6));
  CHECK(no_worker_left(dir));
}
