// Jobs across hosts: hosts are network namespaces joined by a bridge (distributed/host_net.h), ranks
// are real processes started in them, one command per host as a user would type it. Skipped where
// namespaces cannot be made (not root).
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <fstream>
#include <thread>

#include "distributed/host_net.h"
#include "distributed/multi_rank.h"
#include "volt/distributed/cluster_env.h"

using namespace volt;
using namespace volt::testing;
using Catch::Matchers::Contains;

namespace {
#define REQUIRE_HOSTS()                             \
  do {                                              \
    const std::string why = HostNet::unavailable(); \
    if (!why.empty()) {                             \
      WARN("skipped: " << why);                     \
      return;                                       \
    }                                               \
  } while (0)

const int kPort = 29611;

std::string fsdp(const std::string& sharding, const std::string& extra = "") {
  return "{name: fsdp, sharding_strategy: " + sharding + ", auto_wrap_policy: {module_types: [Block]}" + extra + "}";
}

/// One command per host (volt's launcher: `ranks` ranks each), node h with NODE_RANK=h and the
/// master on host 0, as `--node_rank --master_addr --master_port` set them. Returns the exit codes.
std::vector<int> run_on_hosts(const HostNet& net, const std::string& dir, std::map<std::string, std::string> kv,
                              int ranks, const std::map<std::string, std::string>& env = {}, int timeout_s = 240) {
  kv["trainer.devices"] = std::to_string(ranks);
  kv["trainer.num_nodes"] = std::to_string(net.size());
  std::vector<std::vector<std::string>> argvs;
  std::vector<std::map<std::string, std::string>> envs;
  for (int h = 0; h < net.size(); ++h) {
    argvs.push_back(net.wrap(h, worker_argv(dir + "/o.pt", kv)));
    auto e = env;
    e["NODE_RANK"] = std::to_string(h);
    e["MASTER_ADDR"] = net.address(0);
    e["MASTER_PORT"] = std::to_string(kPort);
    envs.push_back(e);
  }
  return run_processes(argvs, envs, timeout_s, dir + "/host");
}

std::string host_logs(const std::string& dir, int hosts) {
  std::string all;
  for (int h = 0; h < hosts; ++h)
    all += "--- host " + std::to_string(h) + "\n" + read_text(dir + "/host." + std::to_string(h) + ".log");
  return all;
}
}  // namespace

TEST_CASE("2 hosts x 2 ranks: DDP and every FSDP sharding strategy equal one process with the same global batch",
          "[hosts][multirank]") {
  REQUIRE_HOSTS();
  HostNet net(2);
  const std::string base_dir = temp_dir("hosts-parity");
  auto kv = quiet_blocks_kv(base_dir);
  kv["adam"] = "true";
  kv["lr"] = "0.01";
  kv["trainer.gradient_clip_val"] = "0.05";
  auto single_kv = kv;
  single_kv["batch_size"] = "16";
  const WorkerResult single = train_single(single_kv);
  for (const std::string strategy : {std::string("ddp"), fsdp("FULL_SHARD"), fsdp("SHARD_GRAD_OP"),
                                     fsdp("HYBRID_SHARD"), fsdp("_HYBRID_SHARD_ZERO2")}) {
    DYNAMIC_SECTION(strategy) {
      const std::string dir = temp_dir("hosts-parity");
      auto run_kv = kv;
      run_kv["trainer.default_root_dir"] = dir;
      run_kv["batch_size"] = "4";
      run_kv["trainer.strategy"] = strategy;
      const auto codes = run_on_hosts(net, dir, run_kv, 2);
      INFO(host_logs(dir, 2));
      REQUIRE(codes == std::vector<int>{0, 0});
      const WorkerResult r = read_worker_output(dir + "/o.pt");
      REQUIRE(r.losses.size() == single.losses.size());
      for (size_t i = 0; i < r.losses.size(); ++i) CHECK(r.losses[i] == Approx(single.losses[i]).epsilon(1e-5));
      CHECK(max_state_diff(r.state, single.state) < 2e-5);
      // The groups ran over the link between the hosts, on the interface that reaches the master.
      const std::string log0 = read_text(dir + "/host.0.log"), log1 = read_text(dir + "/host.1.log");
      CHECK_THAT(log1, Contains("gloo on eth0 (" + net.address(1) + ")"));
      CHECK_THAT(log0, Contains("node 0 of 2"));
      if (strategy.find("HYBRID") != std::string::npos) CHECK_THAT(log0, Contains("mesh (replicate=2, shard=2)"));
      CHECK(no_worker_left(dir));
    }
  }
}

TEST_CASE("a sharded checkpoint written across hosts resumes on other layouts: 2x2 -> 1x4 -> 4x1",
          "[hosts][multirank][checkpoint]") {
  REQUIRE_HOSTS();
  const std::string dir = temp_dir("hosts-reshard");
  auto kv = quiet_blocks_kv(dir);
  kv["batch_size"] = "4";
  kv["trainer.strategy"] = fsdp("FULL_SHARD", ", state_dict_type: sharded");
  kv["trainer.enable_checkpointing"] = "true";
  kv["checkpoint_every_n_train_steps"] = "2";
  kv["trainer.max_epochs"] = "-1";
  // Uninterrupted, on one host.
  const std::string whole_dir = temp_dir("hosts-reshard-whole");
  auto whole = kv;
  whole["trainer.default_root_dir"] = whole_dir;
  whole["trainer.max_steps"] = "12";
  whole["trainer.devices"] = "4";
  REQUIRE(run_worker(args_for(whole_dir + "/o.pt", whole), whole_dir) == 0);
  {
    HostNet net(2);
    kv["trainer.max_steps"] = "4";
    INFO(host_logs(dir, 2));
    REQUIRE(run_on_hosts(net, dir, kv, 2) == std::vector<int>{0, 0});
  }
  kv["ckpt_path"] = "last";
  kv["trainer.max_steps"] = "8";
  kv["trainer.devices"] = "4";
  REQUIRE(run_worker(args_for(dir + "/o.pt", kv), dir) == 0);
  CHECK_THAT(read_text(dir + "/worker.0.log"), Contains("Restoring states"));
  {
    HostNet net(4);
    kv["trainer.max_steps"] = "12";
    const auto codes = run_on_hosts(net, dir, kv, 1);
    INFO(host_logs(dir, 4));
    REQUIRE(codes == std::vector<int>(4, 0));
  }
  const WorkerResult resumed = read_worker_output(dir + "/o.pt");
  const WorkerResult uninterrupted = read_worker_output(whole_dir + "/o.pt");
  CHECK(resumed.global_step == 12);
  CHECK(max_state_diff(resumed.state, uninterrupted.state) < 1e-6);
}

TEST_CASE("predict on 2 hosts x 2 ranks gives each sample exactly once", "[hosts][multirank][predict]") {
  REQUIRE_HOSTS();
  HostNet net(2);
  const std::string dir = temp_dir("hosts-predict");
  auto kv = quiet_worker_kv(dir);
  kv["batch_size"] = "4";
  kv["trainer.max_steps"] = "2";
  kv["trainer.strategy"] = "ddp";
  kv["predict_dir"] = dir + "/pred";
  kv["predict_samples"] = "37";
  const auto codes = run_on_hosts(net, dir, kv, 2);
  INFO(host_logs(dir, 2));
  REQUIRE(codes == std::vector<int>{0, 0});
  std::vector<int> count(37, 0);
  for (int rank = 0; rank < 4; ++rank) {
    std::ifstream in(dir + "/pred/rank_" + std::to_string(rank) + ".pt", std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    REQUIRE(!bytes.empty());
    const auto d = torch::pickle_load(bytes).toGenericDict();
    for (int64_t b = 0;; ++b) {
      const std::string key = "dataloader_0/batch_" + std::to_string(b) + "/sample_indices";
      if (!d.contains(key)) break;
      const auto idx = d.at(key).toTensor();
      for (int64_t k = 0; k < idx.size(0); ++k) ++count[idx[k].item<int64_t>()];
    }
  }
  CHECK(count == std::vector<int>(37, 1));
}

TEST_CASE("torchrun's and SLURM's variables across 2 hosts: one process per rank, started by hand",
          "[hosts][multirank][launch]") {
  REQUIRE_HOSTS();
  HostNet net(2);
  for (std::string launcher : {"torchrun", "slurm"}) {
    DYNAMIC_SECTION(launcher) {
      const std::string dir = temp_dir("hosts-env");
      auto kv = quiet_worker_kv(dir);
      kv["batch_size"] = "4";
      kv["trainer.strategy"] = "ddp";
      kv["trainer.devices"] = "2";
      kv["trainer.num_nodes"] = "2";
      std::vector<std::vector<std::string>> argvs;
      std::vector<std::map<std::string, std::string>> envs;
      for (int r = 0; r < 4; ++r) {
        const int node = r / 2, local = r % 2;
        argvs.push_back(net.wrap(node, worker_argv(dir + "/o.pt", kv)));
        std::map<std::string, std::string> e;
        if (launcher == "torchrun") {
          e = {{"RANK", std::to_string(r)},           {"WORLD_SIZE", "4"},
               {"LOCAL_RANK", std::to_string(local)}, {"LOCAL_WORLD_SIZE", "2"},
               {"GROUP_RANK", std::to_string(node)},  {"MASTER_ADDR", net.address(0)},
               {"MASTER_PORT", std::to_string(kPort)}};
        } else {
          // The first host of the step's node list is the master; the hosts resolve by /etc/hosts
          // nowhere here, so the list holds the addresses themselves.
          e = {{"SLURM_PROCID", std::to_string(r)},
               {"SLURM_NTASKS", "4"},
               {"SLURM_LOCALID", std::to_string(local)},
               {"SLURM_NODEID", std::to_string(node)},
               {"SLURM_NNODES", "2"},
               {"SLURM_TASKS_PER_NODE", "2(x2)"},
               {"SLURM_STEP_NODELIST", net.address(0) + "," + net.address(1)},
               {"SLURM_NODELIST", "ignored[01-02]"},
               {"SLURM_JOB_ID", std::to_string(kPort)}};
        }
        envs.push_back(e);
      }
      const auto codes = run_processes(argvs, envs, 240, dir + "/rank");
      std::string logs;
      for (int r = 0; r < 4; ++r) logs += read_text(dir + "/rank." + std::to_string(r) + ".log");
      INFO(logs);
      REQUIRE(codes == std::vector<int>(4, 0));
      CHECK_THAT(logs, Contains("node 1 of 2"));
      auto single_kv = quiet_worker_kv(dir);
      single_kv["batch_size"] = "16";
      CHECK(max_state_diff(read_worker_output(dir + "/o.pt").state, train_single(single_kv).state) < 2e-5);
    }
  }
}

TEST_CASE("the network device: GLOO_SOCKET_IFNAME is honoured, and a wrong one names the interfaces there are",
          "[hosts][multirank][launch]") {
  REQUIRE_HOSTS();
  HostNet net(2);
  auto kv = quiet_worker_kv(temp_dir("hosts-ifname"));
  kv["batch_size"] = "4";
  kv["trainer.strategy"] = "ddp";
  kv["trainer.max_steps"] = "2";
  SECTION("eth0 by name") {
    const std::string dir = temp_dir("hosts-ifname");
    kv["trainer.default_root_dir"] = dir;
    const auto codes = run_on_hosts(net, dir, kv, 2, {{"GLOO_SOCKET_IFNAME", "eth0"}});
    INFO(host_logs(dir, 2));
    REQUIRE(codes == std::vector<int>{0, 0});
    CHECK_THAT(read_text(dir + "/host.1.log"), Contains("gloo on eth0 (GLOO_SOCKET_IFNAME=eth0)"));
  }
  SECTION("an interface this host lacks") {
    const std::string dir = temp_dir("hosts-ifname");
    kv["trainer.default_root_dir"] = dir;
    const auto start = std::chrono::steady_clock::now();
    const auto codes = run_on_hosts(net, dir, kv, 2, {{"GLOO_SOCKET_IFNAME", "eth7"}}, 120);
    CHECK(codes[0] != 0);
    CHECK(codes[1] != 0);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(60));
    const std::string log = read_text(dir + "/host.1.log");
    CHECK_THAT(log,
               Contains("interface 'eth7'") && Contains("eth0 (" + net.address(1) + ")") && Contains("lo (127.0.0.1)"));
    CHECK(no_worker_left(dir));
  }
}

TEST_CASE(
    "a host lost or cut off, or its launcher killed, ends every surviving rank within 30 s, naming the host and its "
    "ranks",
    "[hosts][multirank][fault]") {
  REQUIRE_HOSTS();
  for (std::string how : {"killed", "cut off", "launcher killed"}) {
    DYNAMIC_SECTION(how) {
      HostNet net(2);
      const std::string dir = temp_dir("hosts-fault");
      auto kv = quiet_worker_kv(dir);
      kv["batch_size"] = "4";
      kv["samples"] = "400000";  // long enough to be interrupted
      kv["trainer.strategy"] = "ddp";
      kv["trainer.max_epochs"] = "1";
      kv["trainer.devices"] = "2";
      kv["trainer.num_nodes"] = "2";
      std::vector<std::vector<std::string>> argvs;
      std::vector<std::map<std::string, std::string>> envs;
      for (int h = 0; h < 2; ++h) {
        argvs.push_back(net.wrap(h, worker_argv(dir + "/o.pt", kv)));
        envs.push_back({{"NODE_RANK", std::to_string(h)},
                        {"MASTER_ADDR", net.address(0)},
                        {"MASTER_PORT", std::to_string(kPort)}});
      }
      // Training under way on both hosts, then host 1 goes.
      std::chrono::steady_clock::time_point fault_at;
      std::thread fault([&] {
        auto joined = [&](int h) {
          return read_text(dir + "/host." + std::to_string(h) + ".log").find("Initialized process group") !=
                 std::string::npos;
        };
        for (int i = 0; i < 1200 && !(joined(0) && joined(1)); ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        std::this_thread::sleep_for(std::chrono::seconds(3));  // training under way on both hosts
        fault_at = std::chrono::steady_clock::now();
        if (how == "killed")
          net.kill_host(1);
        else if (how == "cut off")
          net.set_link(1, false);
        else
          net.kill_first(1);  // rank 2, which launched rank 3
      });
      const auto codes = run_processes(argvs, envs, 150, dir + "/host");
      const auto ended = std::chrono::steady_clock::now();
      fault.join();
      const double secs = std::chrono::duration<double>(ended - fault_at).count();
      INFO(host_logs(dir, 2) << "ended " << secs << " s after the fault");
      CHECK(secs < 30);
      CHECK(codes[0] != 0);
      CHECK(codes[1] != 0);
      CHECK(codes[0] != 128 + SIGKILL);  // ended by itself, not by the test's timeout
      const std::string log0 = read_text(dir + "/host.0.log");
      if (how == "launcher killed") {
        // Rank 3 outlives its launcher long enough to say which rank died, for every host.
        CHECK_THAT(log0, Contains("rank 2 (volt's launcher on node 1), pid") && Contains("died; ending rank 3"));
        CHECK_THAT(read_text(dir + "/host.1.log"), Contains("[rank 3] rank 2 (volt's launcher on node 1), pid"));
      } else {
        CHECK_THAT(log0, Contains("node 1: ranks 2, 3) was lost"));
      }
      if (how == "cut off") {
        CHECK(codes[1] != 128 + SIGKILL);
        CHECK_THAT(read_text(dir + "/host.1.log"), Contains("rank 0 stopped answering") && Contains(net.address(0)));
      }
      CHECK(net.processes(0) == 0);
      CHECK(net.processes(1) == 0);
      CHECK(no_worker_left(dir));
    }
  }
}
