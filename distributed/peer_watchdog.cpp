#include "volt/distributed/peer_watchdog.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "volt/core/errors.h"

namespace volt {

namespace {
const char* const kAbortKey = "volt_abort";
const char* const kGoneKey = "volt_gone";  // ranks > 0 that left, or saw rank 0 leave
std::string alive_key(int64_t r) { return "volt_alive/" + std::to_string(r); }
std::string left_key(int64_t r) { return "volt_left/" + std::to_string(r); }
std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }
using Clock = std::chrono::steady_clock;
}  // namespace

struct PeerWatchdog::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  std::atomic<bool> counted_gone{false};
};

LivenessOptions LivenessOptions::from_env() {
  LivenessOptions o;
  const char* v = std::getenv("VOLT_HEARTBEAT_TIMEOUT");
  if (!v || !*v) return o;
  char* end = nullptr;
  const double secs = std::strtod(v, &end);
  VOLT_CHECK(end && *end == '\0' && secs >= 0 && secs <= 86400, ConfigError,
             "environment variable VOLT_HEARTBEAT_TIMEOUT: expected seconds between 0 (off) and 86400, got '", v, "'");
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(secs * 1000));
  return o;
}

PeerWatchdog::PeerWatchdog(const std::string& host, int port, int64_t rank, int64_t world_size, LivenessOptions options)
    : impl_(std::make_unique<Impl>()), rank_(rank), size_(world_size), opts_(std::move(options)) {
  if (!opts_.on_stuck) opts_.on_stuck = [](const std::string& m) { detail::end_blocked_process(m); };
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(port);
  so.isServer = false;
  so.waitWorkers = false;  // a second connection of this rank: not counted as a worker
  so.timeout = std::chrono::seconds(30);
  impl_->store = c10::make_intrusive<c10d::TCPStore>(host, so);
  impl_->store->add(alive_key(rank_), 1);  // alive from now on
  last_change_ = Clock::now();
  thread_ = std::thread([this] { run(); });
}

PeerWatchdog::~PeerWatchdog() {
  leave();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string PeerWatchdog::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

std::string PeerWatchdog::await_failure() const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, opts_.timeout + 2 * opts_.interval, [this] { return !failure_.empty() || stop_; });
  return failure_;
}

void PeerWatchdog::check(const std::string& what) const {
  if (!failed_.load()) return;
  throw DistributedError(detail::str_cat(what, " cannot proceed: ", failure(), "; stopping"));
}

void PeerWatchdog::report(const std::string& what) { fail(what, /*post=*/true); }

void PeerWatchdog::fail(const std::string& what, bool post) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.empty()) return;
    failure_ = what;
    failed_at_ = Clock::now();
    failed_ = true;
  }
  cv_.notify_all();
  if (!post) return;
  try {
    const std::string v = what;
    impl_->store->compareSet(kAbortKey, {}, std::vector<uint8_t>(v.begin(), v.end()));  // first post wins
  } catch (const std::exception&) {
    // The store is gone too: the peers learn of it by losing the store.
  }
}

void PeerWatchdog::run() {
  bool store_ok = true;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, opts_.interval, [this] { return stop_; })) return;
    }
    if (store_ok) {
      try {
        tick();
      } catch (const std::exception& e) {
        store_ok = false;
        if (rank_ != 0 && !rank0_left_)
          fail(detail::str_cat("rank 0 stopped answering: rank ", rank_,
                               " lost its connection to the store rank 0 serves (", first_line(e.what()), ")"),
               /*post=*/false);
      }
    }
    // A rank blocked in a collective since (or from before) a known failure cannot be woken.
    std::string stuck;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (failed_ && blocked_ > 0 && Clock::now() - std::max(failed_at_, blocked_since_) >= opts_.grace)
        stuck = detail::str_cat(failure_, "; rank ", rank_, " has been blocked in ", blocked_in_, " for ",
                                std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - blocked_since_).count(),
                                " s and cannot be woken, so it ends here (exit code 1)");
    }
    if (!stuck.empty()) opts_.on_stuck(stuck);
  }
}

void PeerWatchdog::tick() {
  auto& store = *impl_->store;
  store.add(alive_key(rank_), 1);
  if (!failed_ && opts_.peer_failure) {
    const std::string f = opts_.peer_failure();
    if (!f.empty()) fail(f, /*post=*/true);
  }
  if (!failed_ && store.check({kAbortKey})) {
    const auto v = store.get(kAbortKey);
    fail(std::string(v.begin(), v.end()), /*post=*/false);
  }
  if (rank_ != 0 && !rank0_left_ && store.add(left_key(0), 0) > 0) {
    rank0_left_ = true;  // from now on, losing the store is rank 0's clean end
    if (!impl_->counted_gone.exchange(true)) store.add(kGoneKey, 1);
  }
  if (!failed_ && opts_.timeout.count() > 0 && size_ > 1) watch_peer();
}

void PeerWatchdog::watch_peer() {
  auto& store = *impl_->store;
  if (target_ < 0) target_ = (rank_ + 1) % size_;
  if (target_ == rank_) return;  // every other rank has left
  const int64_t beat = store.add(alive_key(target_), 0);
  const auto now = Clock::now();
  if (beat != last_beat_ || beat == 0) {  // moved, or not joined yet (the rendezvous timeout covers that)
    last_beat_ = beat;
    last_change_ = now;
    return;
  }
  if (now - last_change_ < opts_.timeout) return;
  if (store.add(left_key(target_), 0) > 0) {  // it ended cleanly: watch the next one
    target_ = (target_ + 1) % size_;
    last_beat_ = -1;
    return;
  }
  const auto secs = std::chrono::duration_cast<std::chrono::milliseconds>(now - last_change_).count() / 1000.0;
  fail(detail::str_cat("rank ", target_, " stopped answering: no heartbeat for ", secs,
                       " s (killed, crashed or stopped; seen by rank ", rank_, ")"),
       /*post=*/true);
}

void PeerWatchdog::leave() {
  try {
    auto& store = *impl_->store;
    store.add(left_key(rank_), 1);
    if (rank_ != 0) {
      if (!impl_->counted_gone.exchange(true)) store.add(kGoneKey, 1);
      return;
    }
    // Rank 0 serves the store: keep it until every rank has left or seen rank 0 leave (they look
    // every interval), so that none takes the closing store for rank 0's death.
    if (failed_) return;
    const auto deadline = Clock::now() + 4 * opts_.interval;
    while (store.add(kGoneKey, 0) < size_ - 1 && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  } catch (const std::exception&) {
    // The store is already gone: nothing to tell.
  }
}

PeerWatchdog::Blocked::Blocked(PeerWatchdog* w, std::string what) : w_(w) {
  if (!w_) return;
  std::lock_guard<std::mutex> lock(w_->mu_);
  if (w_->blocked_++ == 0) {
    w_->blocked_in_ = std::move(what);
    w_->blocked_since_ = Clock::now();
  }
}

PeerWatchdog::Blocked::~Blocked() {
  if (!w_) return;
  std::lock_guard<std::mutex> lock(w_->mu_);
  --w_->blocked_;
}

namespace detail {
void end_blocked_process(const std::string& message) {
  spdlog::critical("{}", message);
  spdlog::default_logger()->flush();
  std::fflush(nullptr);
  std::_Exit(1);
}
}  // namespace detail

}  // namespace volt
