#pragma once
/// CollectiveWork: a pending collective of a ProcessGroup. wait() rethrows failures as a
/// DistributedError naming the collective and, where the PeerWatchdog knows it, the peer failure
/// behind it; `finish` (if set) runs after (a copy out, Gloo's local sum of a reduce-scatter).
/// Thread-safety: wait from the issuing thread.
#include <functional>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "volt/distributed/comm_clock.h"
#include "volt/distributed/peer_watchdog.h"

namespace volt {

class CollectiveWork {
 public:
  CollectiveWork() = default;
  /// `clock` (optional) is charged with the collective's time: launch to completion, and the wait.
  CollectiveWork(c10::intrusive_ptr<c10d::Work> work, std::string what, std::function<void()> finish,
                 std::shared_ptr<PeerWatchdog> watchdog = nullptr, std::shared_ptr<detail::CommClock> clock = nullptr);
  void wait();
  bool valid() const { return static_cast<bool>(work_) || static_cast<bool>(finish_); }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::string what_;
  std::function<void()> finish_;
  std::shared_ptr<PeerWatchdog> watchdog_;
  std::shared_ptr<detail::CommClock> clock_;
};

namespace detail {
/// Why a collective failed: the peer failure the watchdog knows of (waiting for its judgement, as a
/// dead peer breaks the connection before its heartbeat is missed), else the usual suspects.
std::string failure_cause(const std::shared_ptr<PeerWatchdog>& watchdog);
}  // namespace detail

}  // namespace volt
