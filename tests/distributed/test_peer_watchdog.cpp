// Liveness between ranks started by a cluster launcher (torchrun, SLURM: no volt launcher to watch
// them): a rank that dies, stops or fails makes the others end within seconds, naming it, instead of
// waiting for the collective timeout (600 s here).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <torch/torch.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "boring_model.h"
#include "distributed/multi_rank.h"
#include "volt/core/errors.h"
#include "volt/distributed/cluster_env.h"
#include "volt/distributed/peer_watchdog.h"

using namespace volt::testing;

namespace {

struct Outcome {
  std::vector<int> codes;
  double secs = 0;
  std::vector<std::string> logs;
};

/// Two ranks of the worker under torchrun's variables, rank `fault_rank` faulting with `kind` at
/// step 3. Stops once rank `until` has exited (the others are then killed).
Outcome run_torchrun_fault(const std::string& strategy, int fault_rank, const std::string& kind, int until,
                           const std::string& heartbeat_timeout) {
  const std::string dir = temp_dir("liveness");
  auto kv = quiet_worker_kv(dir);
  kv["batch_size"] = "4";
  kv["trainer.devices"] = "2";
  kv["trainer.strategy"] = "{name: " + strategy + ", timeout: 600}";
  kv["fault_rank"] = std::to_string(fault_rank);
  kv["fault_step"] = "3";
  kv["fault_kind"] = kind;
  const int port = volt::detail::find_free_port();
  std::vector<std::vector<std::string>> argvs;
  std::vector<std::map<std::string, std::string>> envs;
  for (int r = 0; r < 2; ++r) {
    argvs.push_back(worker_argv(dir + "/o.pt", kv));
    envs.push_back(torchrun_env(r, 2, port, {{"VOLT_HEARTBEAT_TIMEOUT", heartbeat_timeout}}));
  }
  Outcome o;
  const auto t0 = std::chrono::steady_clock::now();
  o.codes = run_processes(argvs, envs, 120, dir + "/rank", until);
  o.secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  o.logs = {read_text(dir + "/rank.0.log"), read_text(dir + "/rank.1.log")};
  CHECK(no_worker_left(dir));
  return o;
}

}  // namespace

TEST_CASE("a stopped rank (alive, silent) is declared dead and the rank blocked on it ends, naming it",
          "[distributed][multirank][fault][liveness]") {
  for (std::string strategy : {"ddp", "fsdp"}) {
    DYNAMIC_SECTION(strategy) {
      // Rank 1 stops (SIGSTOP) before step 3; rank 0 sits in that step's collective, which a
      // stopped peer never breaks: only the heartbeat can tell.
      const Outcome o = run_torchrun_fault(strategy, 1, "stop", /*until=*/0, "2");
      INFO(o.logs[0]);
      CHECK(o.codes[0] == 1);
      CHECK(o.secs < 30);  // heartbeat timeout 2 s + grace 5 s, far from the 600 s collective timeout
      CHECK_THAT(o.logs[0], Catch::Contains("rank 1 stopped answering"));
      CHECK_THAT(o.logs[0], Catch::Contains("cannot be woken"));
    }
  }
}

TEST_CASE("a stopped rank 0 (its store silent) is declared dead by the rank blocked on it",
          "[distributed][multirank][fault][liveness]") {
  // Rank 0 serves the store: stopped, it answers no request, and rank 1's heartbeat requests stall.
  const Outcome o = run_torchrun_fault("fsdp", 0, "stop", /*until=*/1, "2");
  INFO(o.logs[1]);
  CHECK(o.codes[1] == 1);
  CHECK(o.secs < 30);
  CHECK_THAT(o.logs[1], Catch::Contains("rank 0 stopped answering"));
}

TEST_CASE("a rank that fails tells the others why", "[distributed][multirank][fault][liveness]") {
  const Outcome o = run_torchrun_fault("fsdp", 1, "throw", /*until=*/-1, "10");
  INFO(o.logs[0] << "\n---- rank 1:\n" << o.logs[1]);
  CHECK(o.codes[0] != 0);
  CHECK(o.codes[0] != -1);
  CHECK(o.codes[1] != 0);
  CHECK(o.secs < 30);
  CHECK_THAT(o.logs[0], Catch::Contains("rank 1 failed: injected fault at step 3"));
}

TEST_CASE("a killed rank under torchrun fails the others within seconds, naming it",
          "[distributed][multirank][fault][liveness]") {
  for (int victim : {1, 0}) {
    DYNAMIC_SECTION("rank " << victim << " killed") {
      const int other = 1 - victim;
      const Outcome o = run_torchrun_fault("fsdp", victim, "kill", /*until=*/other, "3");
      INFO(o.logs[other]);
      CHECK(o.codes[victim] == 128 + 9);
      CHECK(o.codes[other] != 0);
      CHECK(o.codes[other] != -1);
      CHECK(o.secs < 30);
      CHECK_THAT(o.logs[other], Catch::Contains("rank " + std::to_string(victim) + " stopped answering"));
    }
  }
}

TEST_CASE("VOLT_HEARTBEAT_TIMEOUT is checked", "[distributed][liveness]") {
  const char* old = std::getenv("VOLT_HEARTBEAT_TIMEOUT");
  const std::string saved = old ? old : "";
  ::setenv("VOLT_HEARTBEAT_TIMEOUT", "2.5", 1);
  CHECK(volt::LivenessOptions::from_env().timeout == std::chrono::milliseconds(2500));
  ::setenv("VOLT_HEARTBEAT_TIMEOUT", "0", 1);
  CHECK(volt::LivenessOptions::from_env().timeout.count() == 0);
  for (const char* bad : {"ten", "-1", "5s", "1e9"}) {
    ::setenv("VOLT_HEARTBEAT_TIMEOUT", bad, 1);
    CHECK_THROWS_AS(volt::LivenessOptions::from_env(), volt::ConfigError);
  }
  if (old)
    ::setenv("VOLT_HEARTBEAT_TIMEOUT", saved.c_str(), 1);
  else
    ::unsetenv("VOLT_HEARTBEAT_TIMEOUT");
}

namespace {
/// True once no process of the run under `dir` is left, polling for up to `secs`.
bool all_gone_within(const std::string& dir, double secs) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(secs);
  while (!no_worker_left(dir)) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return true;
}

/// The worker self-launching 2 ranks under `dir`, rank `fault_rank` faulting with `kind` at step 3.
int run_launched_fault(const std::string& dir, int fault_rank, const std::string& kind) {
  auto kv = quiet_worker_kv(dir);
  kv["batch_size"] = "4";
  kv["trainer.devices"] = "2";
  kv["trainer.strategy"] = "{name: fsdp, timeout: 600}";
  kv["fault_rank"] = std::to_string(fault_rank);
  kv["fault_step"] = "3";
  kv["fault_kind"] = kind;
  return run_worker(args_for(dir + "/o.pt", kv), dir, 120, {{"VOLT_HEARTBEAT_TIMEOUT", "2"}});
}
}  // namespace

TEST_CASE("rank 0 (the launcher) killed: the launched ranks end at once, naming it",
          "[distributed][multirank][fault][liveness]") {
  const std::string dir = temp_dir("launcher-death");
  CHECK(run_launched_fault(dir, 0, "kill") == 128 + 9);
  CHECK(all_gone_within(dir, 10));
  CHECK_THAT(read_text(dir + "/worker.0.log"), Catch::Contains("[rank 1] rank 0 (volt's launcher on node 0), pid"));
}

TEST_CASE("a stopped launched rank: rank 0 ends and takes the stopped rank with it",
          "[distributed][multirank][fault][liveness]") {
  const std::string dir = temp_dir("launched-stop");
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(run_launched_fault(dir, 1, "stop") == 1);
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 30);
  CHECK(all_gone_within(dir, 5));
  CHECK_THAT(read_text(dir + "/worker.0.log"), Catch::Contains("rank 1 stopped answering"));
}

TEST_CASE("a port where something accepts but never answers ends the joining rank, saying so",
          "[distributed][liveness]") {
  // Another program on MASTER_PORT (or a rank 0 stopped before answering): the TCP connection
  // succeeds and the first store request would wait in recv() for ever.
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(listener >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(listener, 16) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const int port = ntohs(addr.sin_port);
  std::mutex mu;
  std::vector<int> accepted;
  std::thread squatter([&] {
    for (;;) {
      const int c = ::accept(listener, nullptr, nullptr);
      if (c < 0) return;  // the listener was shut down
      std::lock_guard<std::mutex> lock(mu);
      accepted.push_back(c);
    }
  });
  std::string stuck;
  volt::LivenessOptions o;
  o.interval = std::chrono::milliseconds(100);
  o.timeout = std::chrono::milliseconds(1000);
  o.grace = std::chrono::milliseconds(500);
  o.on_stuck = [&](const std::string& m) {
    stuck = m;
    std::lock_guard<std::mutex> lock(mu);
    for (int c : accepted) ::shutdown(c, SHUT_RDWR);  // wakes the blocked request, as an exit would
  };
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS(volt::PeerWatchdog("127.0.0.1", port, /*rank=*/1, /*world_size=*/2, o));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::shutdown(listener, SHUT_RDWR);
  ::close(listener);
  squatter.join();
  for (int c : accepted) ::close(c);
  CHECK_THAT(stuck, Catch::Contains("no rendezvous store answers at 127.0.0.1:" + std::to_string(port)) &&
                        Catch::Contains("MASTER_PORT"));
  CHECK(secs < 10);
}
