#pragma once
/// Where this process sits in a job: rank, world size, local rank and the rendezvous address, read
/// from the environment in this order: torchrun (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
/// MASTER_ADDR, MASTER_PORT), SLURM (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, first host of
/// SLURM_NODELIST), else none (volt's own launcher starts the other ranks).
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace volt {

struct ClusterEnv {
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;
  int64_t local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int port = 29500;
  std::string source = "none";  // "torchrun", "slurm", "volt", "none"

  /// Reads the environment (`getenv` by default; tests pass their own map).
  static ClusterEnv detect(const std::map<std::string, std::string>* env = nullptr);
};

namespace detail {
/// First host of a SLURM node list: "node[01-04,07],gpu3" -> "node01".
std::string first_slurm_host(const std::string& nodelist);
/// A TCP port that was free a moment ago on 127.0.0.1.
int find_free_port();
}  // namespace detail

}  // namespace volt
