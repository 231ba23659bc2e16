#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <optional>
#include <string>

#include "boring_model.h"
#include "trainer/trainer_support.h"
#include "volt/core/errors.h"
#include "volt/distributed/cluster_env.h"
#include "volt/trainer/trainer.h"

using namespace volt;

TEST_CASE("torchrun variables take precedence over SLURM", "[distributed][env]") {
  std::map<std::string, std::string> env{{"RANK", "3"},
                                         {"WORLD_SIZE", "4"},
                                         {"LOCAL_RANK", "1"},
                                         {"LOCAL_WORLD_SIZE", "2"},
                                         {"MASTER_ADDR", "10.0.0.5"},
                                         {"MASTER_PORT", "1234"},
                                         {"SLURM_PROCID", "0"},
                                         {"SLURM_NTASKS", "8"}};
  auto c = ClusterEnv::detect(&env);
  CHECK(c.source == "torchrun");
  CHECK(c.rank == 3);
  CHECK(c.world_size == 4);
  CHECK(c.local_rank == 1);
  CHECK(c.local_world_size == 2);
  CHECK(c.master_addr == "10.0.0.5");
  CHECK(c.port == 1234);
}

TEST_CASE("SLURM variables give rank, size and the first node as master", "[distributed][env]") {
  std::map<std::string, std::string> env{{"SLURM_PROCID", "5"},
                                         {"SLURM_NTASKS", "8"},
                                         {"SLURM_LOCALID", "1"},
                                         {"SLURM_NODELIST", "gpu[07-10,12],cpu1"},
                                         {"SLURM_JOB_ID", "123456"}};
  auto c = ClusterEnv::detect(&env);
  CHECK(c.source == "slurm");
  CHECK(c.rank == 5);
  CHECK(c.world_size == 8);
  CHECK(c.local_rank == 1);
  CHECK(c.master_addr == "gpu07");
  CHECK(c.port == 10000 + 123456 % 20000);
}

TEST_CASE("no launcher environment means single process", "[distributed][env]") {
  std::map<std::string, std::string> env;
  auto c = ClusterEnv::detect(&env);
  CHECK(c.source == "none");
  CHECK(c.world_size == 1);
}

TEST_CASE("inconsistent launcher environments are DistributedErrors", "[distributed][env]") {
  std::map<std::string, std::string> bad{
      {"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "x"}, {"MASTER_PORT", "1"}};
  CHECK_THROWS_AS(ClusterEnv::detect(&bad), DistributedError);
  std::map<std::string, std::string> noaddr{{"RANK", "0"}, {"WORLD_SIZE", "2"}};
  CHECK_THROWS_WITH(ClusterEnv::detect(&noaddr), Catch::Contains("MASTER_ADDR"));
  std::map<std::string, std::string> notint{
      {"RANK", "one"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "x"}, {"MASTER_PORT", "1"}};
  CHECK_THROWS_WITH(ClusterEnv::detect(&notint), Catch::Contains("RANK"));
  // 2^32 + 29500 narrowed to int was 29500: a port of another job.
  std::map<std::string, std::string> wide{
      {"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "x"}, {"MASTER_PORT", "4294996796"}};
  CHECK_THROWS_WITH(ClusterEnv::detect(&wide), Catch::Contains("MASTER_PORT=4294996796 is not a TCP port"));
  std::map<std::string, std::string> slurm_wide{
      {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"MASTER_PORT", "4294996796"}};
  CHECK_THROWS_WITH(ClusterEnv::detect(&slurm_wide), Catch::Contains("MASTER_PORT=4294996796"));
  std::map<std::string, std::string> self_wide{{"MASTER_PORT", "-4294937296"}};
  CHECK_THROWS_WITH(ClusterEnv::detect(&self_wide), Catch::Contains("is not a TCP port"));
  // WORLD_SIZE=0 is named itself, not LOCAL_WORLD_SIZE (which defaults to it).
  std::map<std::string, std::string> empty_world{
      {"RANK", "0"}, {"WORLD_SIZE", "0"}, {"MASTER_ADDR", "x"}, {"MASTER_PORT", "1"}};
  CHECK_THROWS_WITH(ClusterEnv::detect(&empty_world),
                    Catch::Contains("WORLD_SIZE must be >= 1, got 0") && !Catch::Contains("LOCAL_WORLD_SIZE"));
}

TEST_CASE("first SLURM host parsing", "[distributed][env]") {
  CHECK(volt::detail::first_slurm_host("node01") == "node01");
  CHECK(volt::detail::first_slurm_host("node[3-4]") == "node3");
  CHECK(volt::detail::first_slurm_host("a1,b2") == "a1");
  CHECK(volt::detail::find_free_port() > 0);
}

TEST_CASE("torchrun on several nodes: the node comes from GROUP_RANK, else NODE_RANK, else the local layout",
          "[distributed][env]") {
  std::map<std::string, std::string> env{
      {"RANK", "5"},       {"WORLD_SIZE", "8"},       {"LOCAL_RANK", "1"},         {"LOCAL_WORLD_SIZE", "4"},
      {"GROUP_RANK", "1"}, {"GROUP_WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}};
  auto c = ClusterEnv::detect(&env);
  CHECK(c.node_rank == 1);
  CHECK(c.num_nodes == 2);
  CHECK(c.describe_node(1) == "ranks 4-7");
  env.erase("GROUP_RANK");
  env.erase("GROUP_WORLD_SIZE");
  c = ClusterEnv::detect(&env);
  CHECK(c.node_rank == 1);  // 5 / 4
  CHECK(c.num_nodes == 2);
  env["NODE_RANK"] = "1";
  CHECK(ClusterEnv::detect(&env).node_rank == 1);
  env["GROUP_RANK"] = "2";
  CHECK_THROWS_WITH(ClusterEnv::detect(&env), Catch::Contains("node rank 2") && Catch::Contains("2 node(s)"));
  env.erase("GROUP_RANK");
  env["LOCAL_RANK"] = "4";
  CHECK_THROWS_WITH(ClusterEnv::detect(&env), Catch::Contains("local rank 4"));
}

TEST_CASE("SLURM on several nodes: node id, tasks per node and the step's first host", "[distributed][env]") {
  std::map<std::string, std::string> env{{"SLURM_PROCID", "3"},
                                         {"SLURM_NTASKS", "4"},
                                         {"SLURM_LOCALID", "1"},
                                         {"SLURM_NODEID", "1"},
                                         {"SLURM_NNODES", "2"},
                                         {"SLURM_TASKS_PER_NODE", "2(x2)"},
                                         {"SLURM_STEP_NODELIST", "gpu[3-4]"},
                                         {"SLURM_NODELIST", "gpu[1-9]"},
                                         {"MASTER_PORT", "4000"}};
  auto c = ClusterEnv::detect(&env);
  CHECK(c.source == "slurm");
  CHECK(c.node_rank == 1);
  CHECK(c.num_nodes == 2);
  CHECK(c.local_world_size == 2);
  CHECK(c.master_addr == "gpu3");
  CHECK(c.port == 4000);
  env["SLURM_TASKS_PER_NODE"] = "x";
  CHECK_THROWS_WITH(ClusterEnv::detect(&env), Catch::Contains("tasks per node 'x'"));
  CHECK(volt::detail::first_slurm_tasks_per_node("8(x3),4") == 8);
}

TEST_CASE("no launcher: Lightning's NODE_RANK, MASTER_ADDR and MASTER_PORT place this node", "[distributed][env]") {
  std::map<std::string, std::string> env{{"NODE_RANK", "1"}, {"MASTER_ADDR", "10.231.0.1"}, {"MASTER_PORT", "29611"}};
  auto c = ClusterEnv::detect(&env);
  CHECK(c.source == "none");
  CHECK(c.node_rank == 1);
  CHECK(c.master_addr == "10.231.0.1");
  CHECK(c.port == 29611);
  CHECK(c.port_given);
  env["MASTER_PORT"] = "70000";
  CHECK_THROWS_WITH(ClusterEnv::detect(&env), Catch::Contains("MASTER_PORT=70000"));
  env["MASTER_PORT"] = "29611";
  env["NODE_RANK"] = "-1";
  CHECK_THROWS_WITH(ClusterEnv::detect(&env), Catch::Contains("NODE_RANK"));
}

TEST_CASE("a node rank outside trainer.num_nodes is refused before any rank starts", "[distributed][env]") {
  struct NodeRankEnv {  // NODE_RANK for this case only
    std::optional<std::string> before;
    NodeRankEnv() {
      if (const char* v = std::getenv("NODE_RANK")) before = v;
      ::setenv("NODE_RANK", "5", 1);
    }
    ~NodeRankEnv() {
      if (before)
        ::setenv("NODE_RANK", before->c_str(), 1);
      else
        ::unsetenv("NODE_RANK");
    }
  } env;
  auto o = testing::quiet_options(testing::temp_dir("node-rank-range"));
  o.accelerator = "cpu";
  o.devices = 2;
  o.num_nodes = 2;
  o.strategy = "ddp";
  Trainer t(o);
  auto m = testing::make_model(0);
  auto train = testing::make_loader(16, 8);
  try {
    t.fit(*m, train);
    FAIL("fit with NODE_RANK=5 of 2 nodes did not throw");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Catch::Contains("node rank 5") && Catch::Contains("trainer.num_nodes"));
  }
}
