#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "volt/core/errors.h"
#include "volt/distributed/cluster_env.h"

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
}

TEST_CASE("first SLURM host parsing", "[distributed][env]") {
  CHECK(volt::detail::first_slurm_host("node01") == "node01");
  CHECK(volt::detail::first_slurm_host("node[3-4]") == "node3");
  CHECK(volt::detail::first_slurm_host("a1,b2") == "a1");
  CHECK(volt::detail::find_free_port() > 0);
}
