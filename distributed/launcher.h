#pragma once
/// Volt's subprocess launcher, as Lightning's: with `devices: N` and no cluster launcher, the
/// process that runs becomes rank 0 and starts N-1 copies of itself (same executable, same
/// arguments) with RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT set and its share of cores.
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

class Launcher {
 public:
  /// Starts ranks 1..world_size-1 and sets this process's environment as rank 0. Returns the
  /// ClusterEnv of rank 0.
  Launcher(int64_t world_size);
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
  std::vector<pid_t> pids_;  // index i -> rank i + 1
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
/// The signal a launched rank receives when its launcher dies (a real-time signal).
int launcher_death_signal();
/// In a launched rank (`rank` > 0): from now on, the launcher's death ends this rank at once with
/// one line naming it (exit code 1), even if the rank is blocked. Call once, early.
void watch_launcher(int64_t rank);
}  // namespace detail

}  // namespace volt
