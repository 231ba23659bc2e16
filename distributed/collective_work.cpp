#include "volt/distributed/collective_work.h"

#include <ATen/core/ivalue.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include "volt/core/errors.h"

namespace volt {

CollectiveWork::CollectiveWork(c10::intrusive_ptr<c10d::Work> work, std::string what, std::function<void()> finish,
                               std::shared_ptr<PeerWatchdog> watchdog, std::shared_ptr<detail::CommClock> clock)
    : work_(std::move(work)),
      what_(std::move(what)),
      finish_(std::move(finish)),
      watchdog_(std::move(watchdog)),
      clock_(std::move(clock)) {
  if (!clock_ || !work_) return;
  // Completion is seen on the backend's thread, whenever the issuing thread looks (or not).
  const auto t0 = detail::CommClock::Clock::now();
  try {
    work_->getFuture()->addCallback(
        [c = clock_, t0](c10::ivalue::Future&) { c->busy_ns += detail::CommClock::since(t0); });
  } catch (const std::exception&) {
    clock_.reset();  // a backend without futures: not timed
  }
}

namespace detail {
std::string failure_cause(const std::shared_ptr<PeerWatchdog>& w) {
  if (w) {
    const std::string f = w->await_failure();
    if (!f.empty()) return ". Cause: " + f;
  }
  return ". A peer rank probably died or stalled past the timeout; check the other ranks' logs.";
}
}  // namespace detail

void CollectiveWork::wait() {
  const auto t0 = detail::CommClock::Clock::now();
  struct Charge {  // the wait, and the finishing step (a local sum on Gloo) as communication time
    detail::CommClock* c;
    detail::CommClock::Clock::time_point t0;
    ~Charge() {
      if (!c) return;
      const int64_t ns = detail::CommClock::since(t0);
      c->blocked_ns += ns;
    }
  } charge{clock_.get(), t0};
  try {
    if (watchdog_ && work_ && watchdog_->failed()) watchdog_->check(what_);
    PeerWatchdog::Blocked blocked(work_ ? watchdog_.get() : nullptr, what_);
    if (work_) work_->wait();
  } catch (const DistributedError&) {
    work_.reset();
    finish_ = nullptr;
    throw;
  } catch (const std::exception& e) {
    work_.reset();
    finish_ = nullptr;
    std::string msg = e.what();
    throw DistributedError(what_ + " failed: " + msg.substr(0, msg.find('\n')) + detail::failure_cause(watchdog_));
  }
  work_.reset();
  if (finish_) {
    auto f = std::move(finish_);
    finish_ = nullptr;
    const auto f0 = detail::CommClock::Clock::now();
    f();
    if (clock_) clock_->busy_ns += detail::CommClock::since(f0);
  }
}

}  // namespace volt
