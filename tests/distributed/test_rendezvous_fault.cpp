// A launched rank that dies before it joins the rendezvous makes rank 0 fail at once, naming it,
// instead of waiting in the store for the whole timeout; a rank waiting for rank 0's store says so.
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "boring_model.h"
#include "distributed/multi_rank.h"
#include "volt/core/errors.h"
#include "volt/distributed/cluster_env.h"
#include "volt/distributed/rendezvous.h"

using namespace volt::testing;

namespace {
/// Starts one worker per (RANK, WORLD_SIZE) pair, as torchrun would with those variables (devices =
/// WORLD_SIZE), all meeting at one free port; returns their exit codes (logs in <dir>/rank.<i>.log).
std::vector<int> run_torchrun_ranks(const std::string& dir, const std::map<std::string, std::string>& kv,
                                    const std::vector<std::pair<int, int>>& rank_world) {
  const int port = volt::detail::find_free_port();
  std::vector<std::vector<std::string>> argvs;
  std::vector<std::map<std::string, std::string>> envs;
  for (const auto& [rank, world] : rank_world) {
    auto k = kv;
    k["trainer.devices"] = std::to_string(world);
    argvs.push_back(worker_argv(dir + "/o.pt", k));
    envs.push_back({{"RANK", std::to_string(rank)},
                    {"WORLD_SIZE", std::to_string(world)},
                    {"MASTER_ADDR", "127.0.0.1"},
                    {"MASTER_PORT", std::to_string(port)}});
  }
  return run_processes(argvs, envs, 120, dir + "/rank");
}
}  // namespace

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

TEST_CASE(
    "torchrun variables that conflict (a duplicate RANK, another WORLD_SIZE) stop every rank within seconds, "
    "naming the ranks and their values",
    "[distributed][multirank][fault][launch]") {
  struct Case {
    std::string name;
    std::vector<std::pair<int, int>> rank_world;  // RANK, WORLD_SIZE of each process
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"duplicate RANK", {{0, 2}, {1, 2}, {1, 2}}, "RANK=1 is claimed twice"},
      {"larger WORLD_SIZE on rank 1", {{0, 2}, {1, 3}}, "has WORLD_SIZE=3 but rank 0"},
      {"smaller WORLD_SIZE on rank 1", {{0, 3}, {1, 2}}, "has WORLD_SIZE=2 but rank 0"},
  };
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.name) {
      const std::string dir = temp_dir("rdzv-conflict");
      auto kv = quiet_worker_kv(dir);
      kv["trainer.strategy"] = "{name: ddp, timeout: 600}";
      kv["samples"] = "20000";  // training outlasts the news of a late duplicate
      const auto t0 = std::chrono::steady_clock::now();
      const auto codes = run_torchrun_ranks(dir, kv, c.rank_world);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::string logs;
      for (size_t i = 0; i < codes.size(); ++i) logs += read_text(dir + "/rank." + std::to_string(i) + ".log");
      INFO(logs);
      for (int code : codes) {
        CHECK(code != 0);
        CHECK(code != 128 + 9);  // ended by itself
      }
      CHECK(secs < 30);
      // Rank 0 names the conflict too, not only the process that has it.
      CHECK(read_text(dir + "/rank.0.log").find(c.expected) != std::string::npos);
      CHECK(no_worker_left(dir));
    }
  }
}

TEST_CASE("a RANK claimed twice by processes of other WORLD_SIZEs names the world sizes as the cause",
          "[distributed][multirank][fault][launch]") {
  // Node 0 started with devices 2 (ranks 0-1 of 4), node 1 with devices 1 (rank 1 of 2): the
  // duplicate RANK=1 is a symptom; the message named only the duplicate.
  const std::string dir = temp_dir("rdzv-claim-worlds");
  auto kv = quiet_worker_kv(dir);
  kv["trainer.strategy"] = "{name: ddp, timeout: 600}";
  const auto codes = run_torchrun_ranks(dir, kv, {{0, 4}, {1, 4}, {1, 2}});
  const std::string claimants = read_text(dir + "/rank.1.log") + read_text(dir + "/rank.2.log");
  INFO(claimants);
  for (int code : codes) CHECK((code != 0 && code != -1));
  CHECK_THAT(claimants, Catch::Contains("RANK=1 is claimed twice") && Catch::Contains("which have WORLD_SIZE=") &&
                            Catch::Contains("the same trainer.devices and num_nodes"));
  CHECK(no_worker_left(dir));
}

TEST_CASE("rank 0 on a port in use says the port is taken and by whom it may be", "[distributed][fault]") {
  const int port = volt::detail::find_free_port();
  volt::ClusterEnv first;
  first.rank = 0;
  first.world_size = 2;
  first.master_addr = "127.0.0.1";
  first.port = port;
  auto store = volt::detail::connect_store(first, std::chrono::seconds(5));  // this job's rank 0
  // A second process given RANK=0 (or another job on the same MASTER_PORT).
  try {
    volt::detail::connect_store(first, std::chrono::seconds(5));
    FAIL("a second store server on port " << port << " started");
  } catch (const volt::DistributedError& e) {
    CHECK_THAT(e.what(), Catch::Contains(std::to_string(port)) && Catch::Contains("RANK=0") &&
                             Catch::Contains("free MASTER_PORT"));
  }
}

TEST_CASE("a rank whose store is not there yet says whom it waits for, and connects once it is",
          "[distributed][fault]") {
  // The client's connect retried in silence for the whole timeout (30 minutes by default): a node
  // started before node 0 (or without it) said nothing.
  const int port = volt::detail::find_free_port();
  volt::ClusterEnv env;
  env.rank = 1;
  env.world_size = 2;
  env.node_rank = 1;
  env.master_addr = "127.0.0.1";
  env.port = port;
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(16);
  spdlog::default_logger()->sinks().push_back(sink);
  struct Unhook {
    std::shared_ptr<spdlog::sinks::sink> s;
    ~Unhook() {
      auto& sinks = spdlog::default_logger()->sinks();
      sinks.erase(std::remove(sinks.begin(), sinks.end(), s), sinks.end());
    }
  } unhook{sink};
  c10::intrusive_ptr<c10d::Store> server;
  std::thread late_rank0([&] {
    std::this_thread::sleep_for(std::chrono::seconds(15));
    volt::ClusterEnv zero = env;
    zero.rank = 0;
    zero.node_rank = 0;
    server = volt::detail::connect_store(zero, std::chrono::seconds(30));
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto client = volt::detail::connect_store(env, std::chrono::seconds(60));
  late_rank0.join();
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::seconds(15));
  CHECK(client->getTimeout() == std::chrono::seconds(60));  // the job's timeout, not the slice's
  client->set("k", std::vector<uint8_t>{7});
  CHECK(server->get("k") == std::vector<uint8_t>{7});
  std::string said;
  for (const auto& line : sink->last_formatted()) said += line;
  CHECK_THAT(said, Catch::Contains("rank 1 (node 1): no rendezvous store answers at 127.0.0.1:" + std::to_string(port) +
                                   " after ") &&
                       Catch::Contains("is rank 0 (node 0) started"));
}
