#pragma once
/// ElasticAgent: a job that restarts itself when a rank or a host dies (`trainer.max_restarts`), as
/// torchrun's elastic agent does for Python jobs.
///
/// [Note: who restarts]
/// One agent runs on each node, in a process of its own that trains nothing: the command the user
/// started. It starts the node's ranks (all of them, local rank 0 included) as children and watches
/// them, so the restarting never dies with a rank, rank 0 included. The agents talk through a
/// TCPStore that node 0's agent serves at MASTER_ADDR:MASTER_PORT (on one node, a free port); the
/// ranks rendezvous on another port, chosen by node 0's agent for each attempt.
///
/// An attempt: every agent joins it; node 0's agent posts the ranks' port; each agent starts its
/// ranks (attempts after the first with `restart_args`, by default --ckpt_path=last, so they resume
/// from the last checkpoint; "last" with no checkpoint yet starts fresh) and watches them. The first
/// rank that fails, on any node, is posted as the attempt's failure ("node 1 (host h2): rank 3
/// (pid 812) was killed by signal 9"); every agent then stops its ranks (SIGTERM, then SIGKILL after
/// `stop_grace`) and waits until every node has stopped, so no rank of an attempt still runs, or
/// writes a checkpoint, when the next starts. The job succeeds when every node's ranks exit 0.
/// After max_restarts restarts a failure ends the job with an error that lists every failure.
///
/// Agents beat in the store like ranks do (PeerWatchdog's ring): an agent that stops answering, or
/// node 0's store that goes away, ends every agent with an error naming the node: a node whose
/// agent is gone cannot be restarted.
///
/// SIGINT / SIGTERM to an agent stop its ranks and end the job without a restart.
/// Thread-safety: one agent per process, driven from one thread. RAII: the destructor kills any rank
/// still running.
#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "volt/distributed/launcher.h"
#include "volt/distributed/peer_watchdog.h"

namespace volt {

struct AgentOptions {
  LaunchPlan plan;
  int64_t max_restarts = 0;
  /// The job's command line, argv[0] first (this process's by default).
  std::vector<std::string> argv;
  /// Appended to the command line from the first restart on.
  std::vector<std::string> restart_args{"--ckpt_path=last"};
  /// How long agents wait for each other at the start of an attempt.
  std::chrono::milliseconds join_timeout{std::chrono::minutes(10)};
  /// How long stopped ranks get to exit after SIGTERM before SIGKILL.
  std::chrono::milliseconds stop_grace{std::chrono::seconds(3)};
  /// Heartbeats between the agents (VOLT_HEARTBEAT_TIMEOUT applies).
  LivenessOptions liveness;
};

class ElasticAgent {
 public:
  explicit ElasticAgent(AgentOptions options);
  ~ElasticAgent();
  ElasticAgent(const ElasticAgent&) = delete;
  ElasticAgent& operator=(const ElasticAgent&) = delete;

  /// Runs attempts until one succeeds on every node (returns 0). Throws DistributedError when
  /// max_restarts restarts have failed too (naming each failure), when an agent or node 0's store is
  /// lost, or when the agent is asked to stop by a signal.
  int run();

 private:
  /// The attempts; true when one succeeded. Store failures propagate.
  bool attempts(std::vector<std::string>& failures);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// For a program's main(), before it trains: when `max_restarts` > 0 and this process was started
/// by a person (not by torchrun, SLURM or an agent), runs the job under an ElasticAgent on this node
/// (devices ranks, the node's place from NODE_RANK / MASTER_ADDR / MASTER_PORT) and returns its exit
/// code, errors logged; otherwise returns nullopt and the program goes on as a rank. An agent's
/// rank learns of its agent's death here (it ends at once). Throws ConfigError for max_restarts
/// under torchrun or SLURM.
std::optional<int> run_elastic(int64_t max_restarts, int64_t devices, int64_t num_nodes,
                               std::vector<std::string> restart_args = {"--ckpt_path=last"});

}  // namespace volt
