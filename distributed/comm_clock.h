#pragma once
/// What a group's collectives cost this rank: CommStats (public, for benchmarks) and the counters
/// behind it, shared by a group and its pending work.
#include <atomic>
#include <chrono>
#include <cstdint>

namespace volt {

/// What a group's collectives cost this rank since the last reset (benchmarks read it to show the
/// communication hidden behind computation).
struct CommStats {
  int64_t bytes_sent = 0;
  /// Σ over collectives of launch → completion: overlapping collectives add up. Timed on Gloo
  /// (completion is seen on its threads); on NCCL the host cannot see completion, so it is 0.
  double busy_seconds = 0;
  /// Time the issuing thread spent blocked on collectives (waits and synchronous calls).
  double blocked_seconds = 0;
  /// Communication that ran while the issuing thread did something else: busy - blocked (>= 0).
  double hidden_seconds() const { return busy_seconds > blocked_seconds ? busy_seconds - blocked_seconds : 0.0; }
};

namespace detail {

/// A group's counters, shared with its pending work (thread-safe).
struct CommClock {
  using Clock = std::chrono::steady_clock;
  std::atomic<int64_t> busy_ns{0};     // added on Gloo's threads as collectives complete
  std::atomic<int64_t> blocked_ns{0};  // added by the issuing thread
  int64_t bytes_base = 0;              // bytes_sent() at the last reset (issuing thread only)
  static int64_t since(Clock::time_point t0) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
  }
};

/// A synchronous collective: busy and blocked for as long as the scope lasts.
class SyncTimer {
 public:
  explicit SyncTimer(CommClock& c) : c_(c), t0_(CommClock::Clock::now()) {}
  ~SyncTimer() {
    const int64_t ns = CommClock::since(t0_);
    c_.busy_ns += ns;
    c_.blocked_ns += ns;
  }
  SyncTimer(const SyncTimer&) = delete;
  SyncTimer& operator=(const SyncTimer&) = delete;

 private:
  CommClock& c_;
  CommClock::Clock::time_point t0_;
};

}  // namespace detail
}  // namespace volt
