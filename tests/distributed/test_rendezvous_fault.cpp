// A launched rank that dies before it joins the rendezvous makes rank 0 fail at once, naming it,
// instead of waiting in the store for the whole timeout.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <chrono>

#include "boring_model.h"
#include "distributed/multi_rank.h"

using namespace volt::testing;

TEST_CASE("a rank that dies before the rendezvous fails the job within seconds, naming it",
          "[distributed][multirank][fault]") {
  for (std::string strategy : {"ddp", "fsdp"}) {
    DYNAMIC_SECTION(strategy) {
      const std::string dir = temp_dir("rdzv-fault");
      auto kv = quiet_worker_kv(dir);
      kv["trainer.devices"] = "2";
      kv["trainer.strategy"] = "{name: " + strategy + ", timeout: 600}";
      kv["fault_rank"] = "1";
      kv["fault_kind"] = "before_rendezvous";
      const auto t0 = std::chrono::steady_clock::now();
      const int code = run_worker(args_for(dir + "/o.pt", kv), dir, 120);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const std::string log = read_text(dir + "/worker.0.log");
      INFO(log);
      CHECK(code != 0);
      CHECK(code != -1);  // ended by itself, far within the 600 s timeout
      CHECK(secs < 30);
      CHECK(log.find("rank 1") != std::string::npos);
      CHECK(log.find("rendezvous") != std::string::npos);
      CHECK(no_worker_left(dir));
    }
  }
}
