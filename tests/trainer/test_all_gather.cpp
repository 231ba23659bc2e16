// LightningModule::all_gather over real ranks: values in rank order, and with sync_grads the
// gradient each rank's input receives (DDP and FSDP, 2 and 3 processes).
#include <catch2/catch.hpp>
#include <string>

#include "distributed/multi_rank.h"
#include "trainer/trainer_support.h"

using namespace volt;
using namespace volt::testing;

TEST_CASE("all_gather stacks every rank's tensor and carries gradients with sync_grads", "[trainer][multirank]") {
  struct Case {
    const char* strategy;
    int devices;
  };
  for (const Case& c : {Case{"ddp", 2}, Case{"fsdp", 2}, Case{"ddp", 3}}) {
    DYNAMIC_SECTION(c.strategy << " x" << c.devices) {
      const std::string dir = temp_dir("all-gather");
      auto kv = quiet_worker_kv(dir);
      kv["trainer.max_steps"] = "1";
      kv["trainer.devices"] = std::to_string(c.devices);
      kv["trainer.strategy"] = std::string("{name: ") + c.strategy + ", timeout: 60}";
      kv["all_gather_probe"] = "true";
      REQUIRE(run_worker(args_for(dir + "/o.pt", kv), dir, 240) == 0);
      CHECK(read_worker_output(dir + "/o.pt").all_gather_ok == 1.0);
    }
  }
}
