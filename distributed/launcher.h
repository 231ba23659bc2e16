#pragma once
/// Volt's subprocess launcher, as Lightning's: with `devices: N` and no cluster launcher, the
/// process that runs becomes local rank 0 of its node and starts N-1 copies of itself (same
/// executable, same arguments) with torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK,
/// LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and its share of cores.
/// On several nodes one command runs on each, with the node's rank and the master's address
/// (LaunchPlan): node n's ranks are n x devices ... n x devices + devices - 1, and global rank 0 (on
/// node 0) serves the rendezvous at master_addr:port.
///
/// The launcher owns its children: they die with the parent (PR_SET_PDEATHSIG, naming it once they
/// have called detail::watch_launcher; [Note: the launcher's death]); if one exits
/// non-zero or is killed, a watchdog thread logs it, stops the others and the parent's collectives
/// fail; wait_children() reports which rank failed. RAII: the destructor terminates and reaps any
/// child still running. Not thread-safe (one launcher per process).
#include <sys/types.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "volt/distributed/cluster_env.h"

namespace volt {

/// Where this node's ranks go.
struct LaunchPlan {
  int64_t devices = 1;  // ranks on this node
  int64_t num_nodes = 1;
  int64_t node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int port = 0;  // 0: a free port on this host (one node only)
};

class Launcher {
 public:
  /// Starts local ranks 1..devices-1 of this node and sets this process's environment as local rank
  /// 0. Throws DistributedError for a plan that does not add up.
  explicit Launcher(const LaunchPlan& plan);
  ~Launcher();
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  const ClusterEnv& env() const { return env_; }
  /// Waits for every child; throws DistributedError naming the first rank that failed.
  void wait_children();
  /// The rank whose failure was seen first (-1 if none), and its description.
  int64_t failed_rank() const { return failed_rank_.load(); }
  std::string failure() const;
  /// SIGKILL to every rank still running (a stopped one too): for a launcher that must end now.
  /// Thread-safe.
  void kill_all();

 private:
  void watch();
  void terminate_all(int sig);
  ClusterEnv env_;
  std::vector<pid_t> pids_;  // index i -> local rank i + 1
  int64_t first_rank_ = 0;   // this node's local rank 0
  std::vector<bool> reaped_;
  std::vector<int> status_;
  std::thread watchdog_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> failed_rank_{-1};
  mutable std::mutex mu_;
  std::string failure_;
};

namespace detail {
/// This process's command line as argv strings (from /proc/self/cmdline).
std::vector<std::string> self_argv();
/// Cores this process may use.
int64_t available_cores();
/// Sets torchrun's variables for local rank `local_rank` of `plan` in this process's environment
/// (what a launched rank inherits), with OMP_NUM_THREADS = `threads`.
void set_rank_environment(const LaunchPlan& plan, int64_t local_rank, int port, int64_t threads);
/// Starts this executable again with `args` (argv[0] first) and this process's environment; the
/// child dies with its parent (launcher_death_signal) and starts with SIGINT/SIGTERM at their
/// defaults. Throws DistributedError when fork fails.
pid_t spawn_self(const std::vector<std::string>& args, const std::string& what);
/// "rank 3 (pid 77) was killed by signal 9 (Killed)" / "... exited with code 1".
std::string describe_exit(const std::string& who, pid_t pid, int status);
/// The signal a launched rank receives when its launcher dies (a real-time signal).
int launcher_death_signal();
/// In a launched rank (`rank` > 0, `local_rank` on `node`): from now on, the launcher's death
/// writes one line naming it and ends this rank within 5 s (exit code 1), even if the rank is
/// blocked. Call once, early, from the main thread.
void watch_launcher(int64_t rank, int64_t local_rank, int64_t node);
/// After the launcher died: the line watch_launcher wrote, without its "[rank 3] " prefix ("rank 2
/// (volt's launcher on node 1), pid 812, died; ending rank 3"), for the rank's PeerWatchdog to
/// post; "" while it lives.
std::string launcher_death();
}  // namespace detail

}  // namespace volt
