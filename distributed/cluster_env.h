#pragma once
/// Where this process sits in a job: rank, world size, local rank, node and the rendezvous address,
/// read from the environment in this order:
///   - torchrun (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK or NODE_RANK,
///     MASTER_ADDR, MASTER_PORT);
///   - SLURM (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID, SLURM_NNODES, the tasks per
///     node, and the first host of SLURM_STEP_NODELIST / SLURM_JOB_NODELIST / SLURM_NODELIST);
///   - else volt's own launcher starts the ranks of this node: `source` is "none", and Lightning's
///     variables NODE_RANK, MASTER_ADDR and MASTER_PORT (set by hand, or by `volt fit --node_rank
///     --master_addr --master_port`) say where this node sits when a job spans several.
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
  /// This process's node (host) and the number of nodes: torchrun's GROUP_RANK / NNODES.
  int64_t node_rank = 0;
  int64_t num_nodes = 1;
  std::string master_addr = "127.0.0.1";
  int port = 29500;
  /// Whether MASTER_PORT was given (volt's launcher picks a free port on one node otherwise).
  bool port_given = false;
  std::string source = "none";  // "torchrun", "slurm", "volt", "none"

  /// Reads the environment (`getenv` by default; tests pass their own map). Throws DistributedError
  /// naming the variable for a value that is not an integer or a layout that does not add up.
  static ClusterEnv detect(const std::map<std::string, std::string>* env = nullptr);
  /// Global ranks of `node` when every node runs local_world_size ranks: "ranks 2-3".
  std::string describe_node(int64_t node) const;
};

namespace detail {
/// First host of a SLURM node list: "node[01-04,07],gpu3" -> "node01".
std::string first_slurm_host(const std::string& nodelist);
/// Tasks on the first node from SLURM's "2(x3),1" form: 2.
int64_t first_slurm_tasks_per_node(const std::string& spec);
/// A TCP port that was free a moment ago on 127.0.0.1.
int find_free_port();
}  // namespace detail

}  // namespace volt
