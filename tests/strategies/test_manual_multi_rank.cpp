// Manual optimization with two optimizers (tests/gan_model.h) on 2 ranks, as real processes, under
// DDP and FSDP (units per Block, the heads of both optimizers in the root unit), against single-
// process training with the same global batch.
#include <catch2/catch.hpp>

#include "distributed/multi_rank.h"

using namespace volt;
using namespace volt::testing;

TEST_CASE("a GAN under manual optimization on 2 ranks matches single-process training",
          "[manual][optimizers][multirank]") {
  const std::vector<std::pair<std::string, std::string>> strategies = {
      {"ddp", "{name: ddp, find_unused_parameters: true}"},
      {"fsdp", "{name: fsdp, sharding_strategy: FULL_SHARD, auto_wrap_policy: {module_types: [Block]}}"},
      {"fsdp_sharded_ckpt", "{name: fsdp, auto_wrap_policy: {module_types: [Block]}, state_dict_type: sharded}"}};
  for (const auto& [name, strategy] : strategies) {
    DYNAMIC_SECTION(name) {
      const std::string dir = temp_dir("gan-" + name);
      auto kv = quiet_worker_kv(dir);
      kv["gan"] = "true";
      auto single_kv = kv;
      single_kv["batch_size"] = "8";
      WorkerResult single = train_single(single_kv);
      kv["batch_size"] = "4";
      kv["trainer.strategy"] = strategy;
      kv["trainer.devices"] = "2";
      if (name == "fsdp_sharded_ckpt") {
        // Stop after the first epoch with a sharded checkpoint, then resume for the second.
        auto first = kv;
        first["trainer.max_epochs"] = "1";
        first["trainer.enable_checkpointing"] = "true";
        REQUIRE(run_worker(args_for(dir + "/first.pt", first), dir) == 0);
        kv["trainer.enable_checkpointing"] = "true";
        kv["ckpt_path"] = "last";
      }
      REQUIRE(run_worker(args_for(dir + "/o.pt", kv), dir) == 0);
      WorkerResult r = read_worker_output(dir + "/o.pt");
      CHECK(r.global_step == single.global_step);
      CHECK(r.global_step == 32);  // 8 batches x 2 optimizers x 2 epochs
      CHECK(max_state_diff(r.state, single.state) < 2e-5);
    }
  }
}
