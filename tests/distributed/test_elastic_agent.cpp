// trainer.max_restarts: the job restarts itself from the last checkpoint when a rank (rank 0
// included) or a host dies; torchrun's --max-restarts contract (ckpt_path: last).
#include <signal.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "distributed/host_net.h"
#include "distributed/multi_rank.h"
#include "volt/distributed/cluster_env.h"

using namespace volt;
using namespace volt::testing;
using Catch::Matchers::Contains;

namespace {
/// 12 steps of DDP or FSDP on 2 ranks, a checkpoint (and last.ckpt) every 2 steps.
std::map<std::string, std::string> restartable(const std::string& dir, const std::string& strategy) {
  auto kv = quiet_blocks_kv(dir);
  kv["batch_size"] = "4";
  kv["trainer.devices"] = "2";
  kv["trainer.strategy"] = strategy;
  kv["trainer.max_epochs"] = "-1";
  kv["trainer.max_steps"] = "12";
  kv["trainer.enable_checkpointing"] = "true";
  kv["checkpoint_every_n_train_steps"] = "2";
  kv["adam"] = "true";
  kv["lr"] = "0.01";
  return kv;
}

/// restartable() with `restarts` restarts and a fault: `kind` on rank `rank` at step `step`.
std::map<std::string, std::string> faulty(const std::string& dir, int restarts, int rank, int step,
                                          const std::string& kind) {
  auto kv = restartable(dir, "ddp");
  kv["trainer.max_restarts"] = std::to_string(restarts);
  kv["fault_rank"] = std::to_string(rank);
  kv["fault_step"] = std::to_string(step);
  kv["fault_kind"] = kind;
  return kv;
}

WorkerResult uninterrupted(const std::string& strategy) {
  const std::string dir = temp_dir("agent-whole");
  REQUIRE(run_worker(args_for(dir + "/o.pt", restartable(dir, strategy)), dir) == 0);
  return read_worker_output(dir + "/o.pt");
}
}  // namespace

TEST_CASE(
    "max_restarts: a rank killed mid-run, rank 0 included, restarts the job from the last checkpoint, "
    "bitwise equal to the uninterrupted run",
    "[agent][multirank][fault]") {
  const std::string fsdp = "{name: fsdp, auto_wrap_policy: {module_types: [Block]}}";
  for (const std::string strategy : {std::string("ddp"), fsdp}) {
    const WorkerResult whole = uninterrupted(strategy);
    for (int victim : {0, 1}) {
      DYNAMIC_SECTION(strategy << " rank " << victim) {
        const std::string dir = temp_dir("agent-restart");
        auto kv = restartable(dir, strategy);
        kv["trainer.max_restarts"] = "2";
        kv["fault_rank"] = std::to_string(victim);
        kv["fault_step"] = "5";
        kv["fault_kind"] = "kill";
        kv["fault_attempt"] = "0";
        REQUIRE(run_worker(args_for(dir + "/o.pt", kv), dir) == 0);
        const std::string log = read_text(dir + "/worker.0.log");
        CHECK_THAT(log, Contains("restart 1 of 2: node 0") && Contains("rank " + std::to_string(victim)) &&
                            Contains("killed by signal 9"));
        CHECK_THAT(log, Contains("Restoring states"));
        CHECK_THAT(log, !Contains("restart 2 of 2"));
        const WorkerResult r = read_worker_output(dir + "/o.pt");
        CHECK(r.global_step == 12);
        CHECK(max_state_diff(r.state, whole.state) == 0.0);
        CHECK(no_worker_left(dir));
      }
    }
  }
}

TEST_CASE("max_restarts: a job that fails every attempt exits non-zero naming each failure",
          "[agent][multirank][fault]") {
  const std::string dir = temp_dir("agent-fail");
  auto kv = faulty(dir, 1, 1, 3, "exit");  // every attempt
  CHECK(run_worker(args_for(dir + "/o.pt", kv), dir) != 0);
  const std::string log = read_text(dir + "/worker.0.log");
  CHECK_THAT(log, Contains("the job failed 2 time(s), more than trainer.max_restarts=1 allows"));
  CHECK_THAT(log, Contains("(1) node 0") && Contains("(2) node 0") && Contains("rank 1"));
  CHECK_THAT(log, Contains("exited with code 3"));
  CHECK(no_worker_left(dir));
}

TEST_CASE("max_restarts: a rank's configuration error (exit code 2) ends the job without a restart",
          "[agent][multirank][fault]") {
  const std::string dir = temp_dir("agent-config-error");
  auto kv = faulty(dir, 2, 1, 3, "exit2");
  CHECK(run_worker(args_for(dir + "/o.pt", kv), dir) != 0);
  const std::string log = read_text(dir + "/worker.0.log");
  CHECK_THAT(log, Contains("exited with code 2 (a configuration error: a restart would meet it again)"));
  CHECK_THAT(log, !Contains("restart 1 of 2"));
  CHECK(no_worker_left(dir));
}

TEST_CASE("max_restarts: killing the agent ends its ranks, and a signal to it ends the job without a restart",
          "[agent][multirank][fault]") {
  for (int sig : {SIGKILL, SIGTERM}) {
    DYNAMIC_SECTION("signal " << sig) {
      const std::string dir = temp_dir("agent-kill");
      auto kv = restartable(dir, "ddp");
      kv["trainer.max_restarts"] = "3";
      kv["samples"] = "400000";
      kv["trainer.max_steps"] = "-1";
      kv["trainer.max_epochs"] = "1";
      std::thread killer([&] {
        for (int i = 0;
             i < 600 && read_text(dir + "/worker.0.log").find("Initialized process group") == std::string::npos; ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        std::this_thread::sleep_for(std::chrono::seconds(1));
        const std::string cmd = "pkill -" + std::to_string(sig) + " -f -o '[v]olt_test_worker --out=" + dir + "/o.pt'";
        CHECK(std::system(cmd.c_str()) == 0);  // the oldest: the agent
      });
      const int code = run_worker(args_for(dir + "/o.pt", kv), dir, 120);
      killer.join();
      CHECK(code != 0);
      for (int i = 0; i < 50 && !no_worker_left(dir); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      CHECK(no_worker_left(dir));
      if (sig == SIGTERM) {
        const std::string log = read_text(dir + "/worker.0.log");
        CHECK_THAT(log, Contains("stopped by Terminated") && !Contains("restart 1 of 3"));
      }
    }
  }
}

TEST_CASE("torchrun's --max-restarts contract: ckpt_path=last starts fresh, then resumes where the job stopped",
          "[agent][multirank][launch]") {
  const WorkerResult whole = uninterrupted("ddp");
  const std::string dir = temp_dir("agent-torchrun");
  auto kv = restartable(dir, "ddp");
  kv["ckpt_path"] = "last";
  auto run_attempt = [&](int attempt, bool fault) {
    auto k = kv;
    if (fault) {
      k["fault_rank"] = "1";
      k["fault_step"] = "7";
      k["fault_kind"] = "kill";
    }
    const int port = volt::detail::find_free_port();
    std::vector<std::vector<std::string>> argvs;
    std::vector<std::map<std::string, std::string>> envs;
    for (int r = 0; r < 2; ++r) {
      argvs.push_back(worker_argv(dir + "/o.pt", k));
      envs.push_back(torchrun_env(r, 2, port, {{"TORCHELASTIC_RESTART_COUNT", std::to_string(attempt)}}));
    }
    return run_processes(argvs, envs, 240, dir + "/attempt" + std::to_string(attempt));
  };
  const auto first = run_attempt(0, true);
  CHECK(first[1] == 128 + SIGKILL);
  CHECK(first[0] != 0);
  CHECK_THAT(read_text(dir + "/attempt0.0.log"),
             Contains("no last checkpoint exists") && Contains("from the beginning"));
  REQUIRE(run_attempt(1, false) == std::vector<int>{0, 0});
  CHECK_THAT(read_text(dir + "/attempt1.0.log"), Contains("Restoring states"));
  CHECK(max_state_diff(read_worker_output(dir + "/o.pt").state, whole.state) == 0.0);
}

TEST_CASE("max_restarts under torchrun's variables is refused: torchrun restarts its own ranks", "[agent][config]") {
  const std::string dir = temp_dir("agent-under-torchrun");
  auto kv = restartable(dir, "ddp");
  kv["trainer.max_restarts"] = "2";
  const auto codes = run_processes({worker_argv(dir + "/o.pt", kv)},
                                   {torchrun_env(0, 2, volt::detail::find_free_port())}, 60, dir + "/rank");
  CHECK(codes[0] != 0);
  CHECK_THAT(read_text(dir + "/rank.0.log"), Contains("trainer.max_restarts") && Contains("torchrun --max-restarts"));
}

TEST_CASE("max_restarts across 2 hosts: a rank on the second host dies, every rank stops, the job resumes",
          "[agent][hosts][multirank][fault]") {
  const std::string why = HostNet::unavailable();
  if (!why.empty()) {
    WARN("skipped: " << why);
    return;
  }
  const WorkerResult whole = uninterrupted("ddp");
  HostNet net(2);
  const std::string dir = temp_dir("agent-hosts");
  auto kv = restartable(dir, "ddp");
  kv["trainer.devices"] = "1";
  kv["trainer.num_nodes"] = "2";
  kv["trainer.max_restarts"] = "1";
  kv["fault_rank"] = "1";
  kv["fault_step"] = "5";
  kv["fault_kind"] = "kill";
  kv["fault_attempt"] = "0";
  std::vector<std::vector<std::string>> argvs;
  std::vector<std::map<std::string, std::string>> envs;
  for (int h = 0; h < 2; ++h) {
    argvs.push_back(net.wrap(h, worker_argv(dir + "/o.pt", kv)));
    envs.push_back({{"NODE_RANK", std::to_string(h)}, {"MASTER_ADDR", net.address(0)}, {"MASTER_PORT", "29612"}});
  }
  const auto codes = run_processes(argvs, envs, 240, dir + "/host");
  const std::string log0 = read_text(dir + "/host.0.log"), log1 = read_text(dir + "/host.1.log");
  INFO(log0 << "\n---\n" << log1);
  REQUIRE(codes == std::vector<int>{0, 0});
  CHECK_THAT(log0, Contains("restart 1 of 1: node 1") && Contains("rank 1"));
  CHECK_THAT(log1, Contains("restart 1 of 1: node 1"));
  // 2 hosts x 1 rank with batch 4 is the same global batch as 1 host x 2 ranks: the same run.
  CHECK(max_state_diff(read_worker_output(dir + "/o.pt").state, whole.state) == 0.0);
}

TEST_CASE("max_restarts on one node only: both nodes end within seconds, naming trainer.max_restarts",
          "[agent][multirank][config]") {
  for (const int agent_node : {0, 1}) {
    DYNAMIC_SECTION("the agent on node " << agent_node) {
      const std::string dir = temp_dir("agent-one-node");
      const std::string port = std::to_string(volt::detail::find_free_port());
      std::vector<std::vector<std::string>> argvs;
      std::vector<std::map<std::string, std::string>> envs;
      for (int h = 0; h < 2; ++h) {
        auto kv = restartable(dir, "ddp");
        kv["trainer.devices"] = "1";
        kv["trainer.num_nodes"] = "2";
        kv["trainer.max_restarts"] = h == agent_node ? "1" : "0";
        argvs.push_back(worker_argv(dir + "/o.pt", kv));
        envs.push_back({{"NODE_RANK", std::to_string(h)}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}});
      }
      const auto start = std::chrono::steady_clock::now();
      const auto codes = run_processes(argvs, envs, 120, dir + "/host");
      const std::string log0 = read_text(dir + "/host.0.log"), log1 = read_text(dir + "/host.1.log");
      INFO(log0 << "\n---\n" << log1);
      CHECK(codes[0] != 0);
      CHECK(codes[1] != 0);
      CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(60));  // not the 10-minute join
      const std::string& agent_log = agent_node == 0 ? log0 : log1;
      const std::string& rank_log = agent_node == 0 ? log1 : log0;
      CHECK_THAT(agent_log, Contains("a rank, not a restart agent, joined the agents' store") &&
                                Contains("every node must be started with the same trainer.max_restarts"));
      CHECK_THAT(rank_log, Contains("is a restart agent") && Contains("the same trainer.max_restarts"));
    }
  }
}

TEST_CASE("max_restarts: a rank that stops (SIGSTOP) is named as the cause, not the peer that saw it",
          "[agent][multirank][fault]") {
  // Rank 1 freezes; rank 0 misses its heartbeats and exits with code 1 first. The restart line
  // named rank 0.
  const std::string dir = temp_dir("agent-stopped-rank");
  auto kv = faulty(dir, 1, 1, 5, "stop");
  kv["fault_attempt"] = "0";
  REQUIRE(run_worker(args_for(dir + "/o.pt", kv), dir, 180) == 0);
  const std::string log = read_text(dir + "/worker.0.log");
  INFO(log);
  CHECK_THAT(log, Contains("restart 1 of 1: node 0") && Contains(": rank 1 (pid ") &&
                      Contains(") was stopped by Stopped") && Contains(", then node 0"));
  CHECK(read_worker_output(dir + "/o.pt").global_step == 12);
  CHECK(no_worker_left(dir));
}

TEST_CASE("max_restarts: an agent waiting for the other nodes' agents says so, and a signal ends the wait",
          "[agent][multirank][fault]") {
  const std::string dir = temp_dir("agent-alone");
  auto kv = restartable(dir, "ddp");
  kv["trainer.devices"] = "1";
  kv["trainer.num_nodes"] = "2";
  kv["trainer.max_restarts"] = "1";
  const std::string port = std::to_string(volt::detail::find_free_port());
  std::thread stopper([&] {
    for (int i = 0; i < 300 && read_text(dir + "/node.0.log").find("nodes' agents have arrived") == std::string::npos;
         ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const std::string cmd = "pkill -TERM -f -o '[v]olt_test_worker --out=" + dir + "/o.pt'";
    CHECK(std::system(cmd.c_str()) == 0);
  });
  const auto t0 = std::chrono::steady_clock::now();
  const auto codes =
      run_processes({worker_argv(dir + "/o.pt", kv)},
                    {{{"NODE_RANK", "0"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}}}, 120, dir + "/node");
  stopper.join();
  const std::string log = read_text(dir + "/node.0.log");
  INFO(log);
  CHECK(codes[0] != 0);
  CHECK(codes[0] != -1);                                                    // ended by itself
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(40));  // not the 10-minute join timeout
  CHECK_THAT(log, Contains("1 of 2 nodes' agents have arrived at 127.0.0.1:" + port) &&
                      Contains("was stopped by Terminated while starting an attempt"));
  CHECK(no_worker_left(dir));
}
