#pragma once
/// The launch flags of a job on several nodes without torchrun: `--node_rank`, `--master_addr` and
/// `--master_port` (torchrun's --node-rank / --master-addr / --master-port). They are not config
/// keys (they differ from node to node); they set Lightning's variables NODE_RANK, MASTER_ADDR and
/// MASTER_PORT, which volt's launcher reads (distributed/cluster_env.h).
#include <map>
#include <string>
#include <vector>

namespace volt::detail {

/// The launch flags' names (without "--").
const std::vector<std::string>& launch_flag_names();
/// Whether `key` (without "--") is a launch flag.
bool is_launch_flag(const std::string& key);
/// Validates the flags and sets their variables in this process's environment; ConfigError names a
/// bad flag (a node rank that is not an integer >= 0, a port outside 1-65535, an empty address).
void export_launch_flags(const std::map<std::string, std::string>& flags);

}  // namespace volt::detail
