#pragma once
/// PeerWatchdog: liveness of the ranks of one job through the rendezvous store, so that no rank waits
/// for the whole collective timeout (30 minutes by default) on a peer that is gone.
///
/// [Note: liveness]
/// Each rank's watchdog, on its own connection to the TCPStore that rank 0 serves, every
/// `interval`:
///   - beats: adds 1 to `volt_alive/<rank>`;
///   - watches the next rank of the ring (rank r watches r+1 mod N, skipping ranks that ended
///     cleanly): a peer whose counter has moved once and then stops for `timeout` is declared dead
///     ("rank 2 stopped answering"). A ring keeps the store's load at a few small requests per rank
///     and interval; a dead rank is seen by its predecessor unless every other rank is dead too;
///   - reads `volt_abort`: the first failure any rank posts (a dead peer it saw, its own error, or a
///     failure its launcher saw), so every rank learns of one failure within an interval, and by name.
/// A known failure makes the next collective throw a DistributedError naming it. A rank already
/// blocked in a collective (a Gloo wait that a dead peer does not always wake, or a store wait in
/// Gloo's connect) cannot be woken: once it has been blocked for `grace` after the failure, the
/// watchdog ends the process (`on_stuck`, by default one critical log line and exit code 1), as
/// PyTorch's NCCL watchdog does; a process that is not blocked is never ended by it.
///
/// Clean ends: a rank that ends cleanly posts `volt_left/<rank>`; rank 0, whose store the others
/// talk to, waits (bounded) for every rank to have left or seen it leave before closing the store,
/// so that losing the store means "rank 0 died" only when rank 0 did not leave.
/// The heartbeat comes from this thread, not from the training loop: a rank in a long computation
/// keeps beating; a rank that hangs with its process alive is caught by the collective timeout.
///
/// Thread-safety: failure(), check(), report() and Blocked may be used from any thread; construct
/// and destroy on one thread. The watchdog owns its thread and store connection (RAII).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace volt {

struct LivenessOptions {
  std::chrono::milliseconds interval{500};
  /// A peer silent this long is dead. 0 turns liveness checks off (heartbeats still go out).
  std::chrono::milliseconds timeout{std::chrono::seconds(10)};
  /// How long a rank may stay blocked in a collective after a failure is known before it is ended.
  std::chrono::milliseconds grace{std::chrono::seconds(5)};
  /// Polled every interval: a non-empty answer is a failure seen locally (volt's launcher reports a
  /// child that died). Optional.
  std::function<std::string()> peer_failure;
  /// Called from the watchdog thread for a rank blocked past `grace`; must not return to a blocked
  /// rank's benefit (the default logs and ends the process). Tests may replace it.
  std::function<void(const std::string&)> on_stuck;

  /// Defaults, with VOLT_HEARTBEAT_TIMEOUT (seconds; 0 = off) applied; throws ConfigError when it is
  /// not a number >= 0.
  static LivenessOptions from_env();
};

/// Where a rank runs, for messages that name hosts.
struct RankPlace {
  int64_t node = 0;
  std::string host;  // "h2 (10.231.0.2)"
};

class PeerWatchdog {
  struct State;  // see [Note: two threads] below

 public:
  /// Connects to the store at host:port (served by rank 0, already up) and starts the threads.
  PeerWatchdog(const std::string& host, int port, int64_t rank, int64_t world_size, LivenessOptions options);
  /// Leaves cleanly (see the Note) and stops the threads.
  ~PeerWatchdog();
  PeerWatchdog(const PeerWatchdog&) = delete;
  PeerWatchdog& operator=(const PeerWatchdog&) = delete;

  /// The first failure known to this rank ("" while none).
  std::string failure() const;
  /// Whether a failure is known (one atomic load: for every collective).
  bool failed() const;
  /// Waits until a failure is known, or for as long as the watchdog needs to judge a peer that falls
  /// silent now (timeout plus five intervals); returns the failure ("" if none).
  std::string await_failure() const;
  /// Throws DistributedError with the known failure, if any, saying that `what` cannot proceed.
  void check(const std::string& what) const;
  /// Posts this rank's own failure for every peer (the first post wins) and records it here.
  void report(const std::string& what);
  /// The job's layout (index: rank), known once the rendezvous is done: from then on a silent rank
  /// is named with its node and host, and a node none of whose ranks answers is reported as a lost
  /// host, with its ranks.
  void set_layout(std::vector<RankPlace> places);

  /// While alive, the calling thread counts as blocked in `what` (a collective or a store wait).
  class Blocked {
   public:
    Blocked(PeerWatchdog* w, std::string what);
    ~Blocked();
    Blocked(const Blocked&) = delete;
    Blocked& operator=(const Blocked&) = delete;

   private:
    std::shared_ptr<State> s_;
  };

 private:
  // [Note: two threads] The state lives in a shared State that both threads hold: the I/O thread
  // talks to the store, and a store served by a stopped rank 0 never answers, so that thread may
  // hang in a request; the guard thread does no I/O, notices a request that stalls past the
  // timeout, and ends a blocked rank. The destructor joins the guard and gives the I/O thread a
  // moment before leaving it detached, holding only the shared State.
  std::shared_ptr<State> state_;
  std::thread io_, guard_;
};

namespace detail {
/// on_stuck's default: one critical line naming the failure and where this rank is blocked, the log
/// flushed, then the process ends with exit code 1.
[[noreturn]] void end_blocked_process(const std::string& message);
}  // namespace detail

}  // namespace volt
