#pragma once
/// The world group's rendezvous: rank 0 serves c10d's TCPStore at MASTER_ADDR:MASTER_PORT and the
/// other ranks connect to it. Before any backend connects, the ranks agree on the world:
///   - every rank claims its rank in the store: a second process with the same RANK fails at once,
///     naming the first (its host and pid), and tells the others through the PeerWatchdog;
///   - every rank publishes its view (rank, world size, node, host, pid); rank 0 checks each view
///     as it arrives (a different WORLD_SIZE, a second claim) and posts a verdict that the other
///     ranks wait for, so a conflict stops every rank within seconds, naming the ranks and their
///     values, instead of after the rendezvous timeout.
/// Rank 0 waits for the others itself (not inside TCPStore), so that a rank that died before joining
/// (reported by `peer_failure`, volt's launcher) ends the wait at once.
#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <functional>
#include <string>

#include "volt/distributed/cluster_env.h"
#include "volt/distributed/peer_watchdog.h"

namespace c10d {
class Store;
}  // namespace c10d

namespace volt::detail {

/// Connects to (rank 0: serves) the store of the job `env` describes. Throws DistributedError.
c10::intrusive_ptr<c10d::Store> connect_store(const ClusterEnv& env, std::chrono::milliseconds timeout);

/// The agreement above, on every rank; `address` is this rank's network address (for messages).
/// `watchdog` (null in a world of one) reports a peer that dies meanwhile. Throws DistributedError
/// naming the conflict or the ranks that did not join.
/// `job_config` (a YAML map, "" = none) is compared with rank 0's as each rank joins: a difference
/// is a ConfigError on every rank naming the first differing key.
void agree_on_world(c10d::Store& store, const ClusterEnv& env, const std::string& address,
                    std::chrono::milliseconds timeout, const std::function<std::string()>& peer_failure,
                    PeerWatchdog* watchdog, const std::string& job_config = "");

/// Whether some rank has begun agree_on_world on `store`. A restart agent (trainer.max_restarts)
/// serves or reaches the agents' store at MASTER_ADDR:MASTER_PORT; a rank there means that a node
/// was started without restarts, which no agent would ever meet.
bool ranks_joined(c10d::Store& store);
/// Ends agree_on_world on every rank waiting on `store` with `reason` (a DistributedError there).
void refuse_ranks(c10d::Store& store, const std::string& reason);

/// Every rank's node and host as published in agree_on_world (index: rank); call after it.
std::vector<RankPlace> read_layout(c10d::Store& store, int64_t world_size);

}  // namespace volt::detail
