// A model of stock torch::nn layers (tests/stock_encoder_model.h: TransformerEncoderLayers wrapped
// by volt::hooked, unchanged inside) under FSDP on 2 ranks, as real processes, against single-
// process training: units picked by type name, units made by wrap() while configure_model()
// builds the model (deferred initialization), and activation checkpointing of stock layers.
#include <catch2/catch.hpp>

#include "distributed/multi_rank.h"

using namespace volt;
using namespace volt::testing;

TEST_CASE("stock TransformerEncoderLayers as FSDP units on 2 ranks match single-process training",
          "[fsdp][stock][multirank]") {
  struct Case {
    std::string name, strategy;
    bool deferred;
  };
  const std::string units = "auto_wrap_policy: {module_types: [TransformerEncoderLayer]}";
  const std::vector<Case> cases = {
      {"policy", "{name: fsdp, " + units + "}", false},
      {"deferred", "{name: fsdp, " + units + "}", true},
      {"deferred_root_only", "{name: fsdp}", true},
      {"deferred_sync_states", "{name: fsdp, sync_module_states: true, " + units + "}", true},
      {"deferred_checkpointed",
       "{name: fsdp, " + units + ", activation_checkpointing_policy: {module_types: [TransformerEncoderLayer]}}", true},
      {"deferred_grad_op", "{name: fsdp, sharding_strategy: SHARD_GRAD_OP, forward_prefetch: true, " + units + "}",
       true}};
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.name) {
      const std::string dir = temp_dir("stock-" + c.name);
      auto kv = quiet_worker_kv(dir);
      kv["stock"] = "true";
      kv["blocks"] = "3";
      kv["deferred"] = c.deferred ? "true" : "false";
      kv["trainer.seed"] = "11";
      kv["record_init"] = "true";
      auto single_kv = kv;
      single_kv["batch_size"] = "8";
      WorkerResult single = train_single(single_kv);
      kv["batch_size"] = "4";
      kv["trainer.strategy"] = c.strategy;
      kv["trainer.devices"] = "2";
      REQUIRE(run_worker(args_for(dir + "/o.pt", kv), dir) == 0);
      WorkerResult r = read_worker_output(dir + "/o.pt");
      // Built unit by unit and sharded as built, the model starts exactly where one process's does.
      REQUIRE(r.init_state.size() == single.init_state.size());
      CHECK(max_state_diff(r.init_state, single.init_state) == 0);
      CHECK(r.global_step == single.global_step);
      CHECK(max_state_diff(r.state, single.state) < 2e-5);
      // Names are the unwrapped module's: no wrapper level in them.
      CHECK(r.state.count("layers.0.linear1.weight") == 1);
      CHECK(r.state.count("proj.weight") == 1);
    }
  }
}
