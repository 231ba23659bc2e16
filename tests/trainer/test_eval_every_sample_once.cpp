// Validation on 2 ranks with an odd number of samples: no sample is padded in twice, so val_loss is
// the mean over the validation set exactly as on one device (FSDP's forward stays collective on
// the rank that ran out).
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "boring_model.h"
#include "distributed/multi_rank.h"

using namespace volt;
using namespace volt::testing;

TEST_CASE("val_loss on 2 ranks of 33 validation samples is the mean over the 33, each counted once",
          "[trainer][validation][multirank]") {
  for (std::string strategy : {"ddp", "fsdp"}) {
    DYNAMIC_SECTION(strategy) {
      const std::string dir = temp_dir("val-once");
      auto kv = quiet_worker_kv(dir);
      kv["samples"] = "66";  // the worker validates on samples / 2 = 33
      kv["batch_size"] = "4";
      kv["trainer.devices"] = "2";
      kv["trainer.max_epochs"] = "1";
      kv["trainer.strategy"] = strategy;
      REQUIRE(run_worker(args_for(dir + "/o.pt", kv), dir, 240) == 0);
      const WorkerResult r = read_worker_output(dir + "/o.pt");
      REQUIRE(r.val_loss >= 0);
      BoringModel m;
      {
        torch::NoGradGuard ng;
        for (auto& p : m.named_parameters()) p.value().copy_(r.state.at(p.key()));
      }
      m.eval();
      RandomDataset val(33, 32, 99);
      std::vector<torch::Tensor> xs;
      for (int64_t i = 0; i < 33; ++i) xs.push_back(val.get(i)[0]);
      torch::NoGradGuard ng;
      const auto out = m.forward(torch::stack(xs));
      const double expected = torch::mse_loss(out, torch::ones_like(out)).item<double>();
      CHECK(r.val_loss == Approx(expected).epsilon(1e-6));
      CHECK(no_worker_left(dir));
    }
  }
}
