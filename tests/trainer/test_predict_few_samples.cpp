// predict on 2 ranks with fewer samples than ranks: the rank without a sample takes part in the
// (collective) forward with a stand-in batch and writes nothing; the command succeeds.
#include <torch/serialize.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <fstream>

#include "boring_model.h"
#include "distributed/multi_rank.h"

using namespace volt;
using namespace volt::testing;

TEST_CASE("predict on 2 ranks with 1 sample: every sample once, and no rank fails", "[trainer][predict][multirank]") {
  for (std::string strategy : {"ddp", "fsdp"}) {
    DYNAMIC_SECTION(strategy) {
      const std::string dir = temp_dir("predict-one-sample");
      auto kv = quiet_worker_kv(dir);
      kv["batch_size"] = "4";
      kv["trainer.devices"] = "2";
      kv["trainer.max_steps"] = "1";
      kv["trainer.strategy"] = strategy;
      kv["predict_dir"] = dir + "/pred";
      kv["predict_samples"] = "1";
      REQUIRE(run_worker(args_for(dir + "/o.pt", kv), dir, 240) == 0);
      int64_t predicted = 0;
      for (int rank = 0; rank < 2; ++rank) {
        std::ifstream in(dir + "/pred/rank_" + std::to_string(rank) + ".pt", std::ios::binary);
        std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        REQUIRE(!bytes.empty());
        const auto d = torch::pickle_load(bytes).toGenericDict();
        if (d.contains("dataloader_0/batch_0/sample_indices")) {
          const auto idx = d.at("dataloader_0/batch_0/sample_indices").toTensor();
          CHECK(rank == 0);
          CHECK(idx.numel() == 1);
          predicted += idx.numel();
        }
      }
      CHECK(predicted == 1);
      CHECK(no_worker_left(dir));
    }
  }
}

TEST_CASE("predict on 2 ranks where rank 1 fails after rank 0 finished: the run fails, naming rank 1",
          "[trainer][predict][multirank]") {
  const std::string dir = temp_dir("predict-late-failure");
  auto kv = quiet_worker_kv(dir);
  kv["batch_size"] = "4";
  kv["trainer.devices"] = "2";
  kv["trainer.max_steps"] = "1";
  kv["trainer.strategy"] = "ddp";
  kv["predict_dir"] = dir + "/pred";
  kv["predict_samples"] = "1";
  kv["fault_rank"] = "1";
  kv["fault_kind"] = "predict_late";  // exits 3, two seconds after its predict ended
  const int code = run_worker(args_for(dir + "/o.pt", kv), dir, 240);
  CHECK(code != 0);
  const std::string log = read_text(dir + "/worker.0.log");
  CHECK_THAT(log, Catch::Matchers::Contains("rank 1") && Catch::Matchers::Contains("exited with code 3"));
  CHECK(no_worker_left(dir));
}
