#include "volt/distributed/peer_watchdog.h"

#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "volt/core/compat.h"
#include "volt/core/errors.h"
#include "volt/distributed/launcher.h"

namespace volt {

namespace {
// The launcher's death signal interrupts the thread it lands on: in a store request, that reads as
// a lost store. The watchdog's threads leave it to the others ([Note: the launcher's death]).
void keep_launcher_signal_away() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, detail::launcher_death_signal());
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

const char* const kAbortKey = "volt_abort";
const char* const kGoneKey = "volt_gone";  // ranks > 0 that left, or saw rank 0 leave
std::string alive_key(int64_t r) { return "volt_alive/" + std::to_string(r); }
std::string left_key(int64_t r) { return "volt_left/" + std::to_string(r); }
std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count() / 1000.0;
}
}  // namespace

struct PeerWatchdog::State {
  int64_t rank = 0, size = 1;
  LivenessOptions opts;
  c10::intrusive_ptr<c10d::Store> store;

  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  bool io_done = false;
  std::string failure;
  std::atomic<bool> failed{false};
  Clock::time_point failed_at;
  int blocked = 0;
  std::string blocked_in;
  Clock::time_point blocked_since;
  bool in_request = false;            // a store request of this rank is under way (guarded by mu)
  std::atomic<bool> answered{false};  // the store has answered this rank once
  Clock::time_point request_since;

  std::atomic<bool> rank0_left{false};
  std::atomic<bool> counted_gone{false};
  // Ring watching: the I/O thread only.
  int64_t target = -1;
  int64_t last_beat = 0;
  Clock::time_point last_change = Clock::now();
  Clock::time_point last_tick = Clock::now();
  std::vector<RankPlace> places;  // guarded by mu; empty until set_layout
  std::string store_host;         // host:port of the store (rank 0's)

  /// "on node 1, host h2 (10.231.0.2); " for rank r, or "" before the layout is known.
  std::string place(int64_t r);
  /// The ranks on `node` ("ranks 2, 3").
  std::string ranks_on(int64_t node);
  /// The failure for a silent `target`: the whole host when its node mates are silent too.
  std::string describe_loss(int64_t target, double silent_s);
  /// "h1 (10.231.0.1), node 0: ranks 0, 1" (the store's address before the layout is known).
  std::string rank0_host() {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (places.empty()) return store_host;
    }
    return detail::str_cat(places_host(0), ", node ", places_node(0), ": ", ranks_on(places_node(0)));
  }
  std::string places_host(size_t r) {
    std::lock_guard<std::mutex> lock(mu);
    return places[r].host;
  }
  int64_t places_node(size_t r) {
    std::lock_guard<std::mutex> lock(mu);
    return places[r].node;
  }

  void fail(const std::string& what, bool post);
  /// Runs `f` (store requests) marked as under way, for the guard to time.
  template <class F>
  auto request(F f) {
    {
      std::lock_guard<std::mutex> lock(mu);
      in_request = true;
      request_since = Clock::now();
    }
    struct Done {
      State* s;
      ~Done() {
        std::lock_guard<std::mutex> lock(s->mu);
        s->in_request = false;
      }
    } done{this};
    return f();
  }
  void tick();
  void watch_peer();
  void io_loop();
  void guard_loop();
  void leave();
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
    : state_(std::make_shared<State>()) {
  State& s = *state_;
  s.rank = rank;
  s.size = world_size;
  s.opts = std::move(options);
  if (!s.opts.on_stuck) s.opts.on_stuck = [](const std::string& m) { detail::end_blocked_process(m); };
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(port);
  so.isServer = false;
  so.waitWorkers = false;  // a second connection of this rank: not counted as a worker
  so.timeout = std::chrono::seconds(30);
  s.store_host = host + ":" + std::to_string(port);
  // The guard first: the first request goes to whatever accepted the connection, and a program
  // that accepts but never answers (another one on MASTER_PORT, or a rank 0 stopped before it could
  // answer) would hold this thread in recv() for ever. Timed like every later request, it ends
  // the rank with a message after the heartbeat timeout and the grace.
  guard_ = std::thread([st = state_] {
    keep_launcher_signal_away();
    st->guard_loop();
  });
  try {
    Blocked blocked(this, "its first request to the rendezvous store");
    s.request([&] {
      s.store = compat::make_tcp_store(host, so);
      return s.store->add(alive_key(rank), 1);  // alive from now on
    });
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(s.mu);
      s.stop = true;
    }
    s.cv.notify_all();
    guard_.join();
    throw;
  }
  s.answered = true;
  io_ = std::thread([st = state_] {
    keep_launcher_signal_away();
    st->io_loop();
  });
}

PeerWatchdog::~PeerWatchdog() {
  State& s = *state_;
  {
    // Leaving is store requests too: a stalled store must not hold this thread for ever.
    Blocked blocked(this, "leaving the rendezvous store");
    s.leave();
  }
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.stop = true;
  }
  s.cv.notify_all();
  guard_.join();
  std::unique_lock<std::mutex> lock(s.mu);
  const bool done = s.cv.wait_for(lock, 4 * s.opts.interval, [&] { return s.io_done; });
  lock.unlock();
  if (done)
    io_.join();
  else
    io_.detach();  // stuck in a request to a store that does not answer; it holds only the State
}

std::string PeerWatchdog::failure() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->failure;
}

bool PeerWatchdog::failed() const { return state_->failed.load(); }

std::string PeerWatchdog::await_failure() const {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  // A silent peer is judged up to an interval after its last beat was seen, plus the two intervals
  // describe_loss waits on its node mates, plus the store requests.
  s.cv.wait_for(lock, s.opts.timeout + 5 * s.opts.interval, [&] { return !s.failure.empty() || s.stop; });
  return s.failure;
}

void PeerWatchdog::check(const std::string& what) const {
  if (!failed()) return;
  throw DistributedError(detail::str_cat(what, " cannot proceed: ", failure(), "; stopping"));
}

void PeerWatchdog::report(const std::string& what) { state_->fail(what, /*post=*/true); }

void PeerWatchdog::set_layout(std::vector<RankPlace> places) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->places = std::move(places);
}

std::string PeerWatchdog::State::place(int64_t r) {
  std::lock_guard<std::mutex> lock(mu);
  if (r < 0 || r >= static_cast<int64_t>(places.size())) return "";
  return detail::str_cat("on node ", places[r].node, ", host ", places[r].host, "; ");
}

std::string PeerWatchdog::State::ranks_on(int64_t node) {
  std::lock_guard<std::mutex> lock(mu);
  std::string out;
  int n = 0;
  for (size_t r = 0; r < places.size(); ++r)
    if (places[r].node == node) out += detail::str_cat(n++ ? ", " : "", r);
  return (n == 1 ? "rank " : "ranks ") + out;
}

std::string PeerWatchdog::State::describe_loss(int64_t target, double silent_s) {
  std::vector<int64_t> mates;
  int64_t node = -1;
  std::string host;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (target < static_cast<int64_t>(places.size())) {
      node = places[target].node;
      host = places[target].host;
      for (size_t r = 0; r < places.size(); ++r)
        if (places[r].node == node && static_cast<int64_t>(r) != target) mates.push_back(static_cast<int64_t>(r));
    }
  }
  // Its node mates silent too: the host is lost, not one rank. Never the host this rank runs on.
  bool all_silent = !mates.empty() && std::find(mates.begin(), mates.end(), rank) == mates.end();
  if (all_silent) {
    std::vector<int64_t> before;
    for (int64_t m : mates) before.push_back(request([&] { return store->add(alive_key(m), 0); }));
    std::this_thread::sleep_for(2 * opts.interval);
    for (size_t i = 0; i < mates.size() && all_silent; ++i)
      all_silent = request([&] { return store->add(alive_key(mates[i]), 0); }) == before[i];
  }
  if (all_silent)
    return detail::str_cat("host ", host, " (node ", node, ": ", ranks_on(node), ") was lost: none of its ranks has ",
                           "sent a heartbeat for ", silent_s, " s (the host died, or its link is down; seen by rank ",
                           rank, ")");
  return detail::str_cat("rank ", target, " stopped answering: no heartbeat for ", silent_s, " s (", place(target),
                         "killed, crashed or stopped; seen by rank ", rank, ")");
}

void PeerWatchdog::State::fail(const std::string& what, bool post) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!failure.empty()) return;
    failure = what;
    failed_at = Clock::now();
    failed = true;
  }
  cv.notify_all();
  if (!post) return;
  try {
    const std::vector<uint8_t> v(what.begin(), what.end());
    request([&] { return store->compareSet(kAbortKey, {}, v); });  // the first post wins
  } catch (const std::exception&) {
    // The store is gone too: the peers learn of it by losing the store.
  }
}

void PeerWatchdog::State::io_loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu);
      if (cv.wait_for(lock, opts.interval, [this] { return stop; })) break;
    }
    try {
      tick();
    } catch (const std::exception& e) {
      if (rank != 0 && !rank0_left)
        fail(detail::str_cat("rank 0 stopped answering: rank ", rank,
                             " lost its connection to the store rank 0 serves at ", store_host, " (",
                             first_line(e.what()), "; rank 0's host ", rank0_host(), ")"),
             /*post=*/false);
      break;  // nothing more to say or hear without the store
    }
  }
  std::lock_guard<std::mutex> lock(mu);
  io_done = true;
  cv.notify_all();
}

void PeerWatchdog::State::guard_loop() {
  std::unique_lock<std::mutex> lock(mu);
  auto last_wake = Clock::now();
  while (!cv.wait_for(lock, opts.interval, [this] { return stop; })) {
    // Held up itself (the whole job stopped and continued): a request's age says nothing then.
    if (Clock::now() - last_wake > 4 * opts.interval && in_request) request_since = Clock::now();
    last_wake = Clock::now();
    // A store that does not answer: rank 0 (its server) is stopped or its host unreachable.
    if (rank != 0 && !rank0_left && !failed && in_request && opts.timeout.count() > 0 &&
        Clock::now() - request_since >= opts.timeout) {
      const double secs = seconds_since(request_since);
      lock.unlock();
      if (answered)
        fail(detail::str_cat("rank 0 stopped answering: the store it serves at ", store_host,
                             " has not replied to rank ", rank, " for ", secs, " s (rank 0 stopped, or its host ",
                             rank0_host(), " down or cut off)"),
             /*post=*/false);
      else
        fail(detail::str_cat("no rendezvous store answers at ", store_host, ": rank ", rank, " has waited ", secs,
                             " s for its first reply. Another program may be listening on MASTER_PORT (give the job "
                             "a free port), or rank 0 stopped before it could answer, or its host is unreachable"),
             /*post=*/false);
      lock.lock();
    }
    // A rank blocked in a collective since (or from before) a known failure cannot be woken.
    if (failed && blocked > 0 && Clock::now() - std::max(failed_at, blocked_since) >= opts.grace) {
      const std::string stuck = detail::str_cat(failure, "; rank ", rank, " has been blocked in ", blocked_in, " for ",
                                                static_cast<int64_t>(seconds_since(blocked_since)),
                                                " s and cannot be woken, so it ends here (exit code 1)");
      lock.unlock();
      opts.on_stuck(stuck);
      lock.lock();
    }
  }
}

void PeerWatchdog::State::tick() {
  request([&] { return store->add(alive_key(rank), 1); });
  // A failure posted by a peer first: a child that exits after posting its cause (a lost host, say)
  // is the consequence, not the cause.
  if (!failed && request([&] { return store->check({kAbortKey}); })) {
    const auto v = request([&] { return store->get(kAbortKey); });
    fail(std::string(v.begin(), v.end()), /*post=*/false);
  }
  if (!failed && opts.peer_failure) {
    const std::string f = opts.peer_failure();
    if (!f.empty()) fail(f, /*post=*/true);
  }
  if (rank != 0 && !rank0_left && request([&] { return store->add(left_key(0), 0); }) > 0) {
    rank0_left = true;  // from now on, losing the store is rank 0's clean end
    if (!counted_gone.exchange(true)) request([&] { return store->add(kGoneKey, 1); });
  }
  if (!failed && opts.timeout.count() > 0 && size > 1) watch_peer();
}

void PeerWatchdog::State::watch_peer() {
  if (target < 0) target = (rank + 1) % size;
  if (target == rank) return;  // every other rank has left
  const int64_t beat = request([&] { return store->add(alive_key(target), 0); });
  const auto now = Clock::now();
  // This rank was itself held up (stopped with its peers by Ctrl-Z, say): no judging across the gap.
  if (now - last_tick > 4 * opts.interval) last_change = now;
  last_tick = now;
  if (beat != last_beat || beat == 0) {  // moved, or not joined yet (the rendezvous timeout covers that)
    last_beat = beat;
    last_change = now;
    return;
  }
  if (now - last_change < opts.timeout) return;
  if (request([&] { return store->add(left_key(target), 0); }) > 0) {  // it ended cleanly: watch the next one
    target = (target + 1) % size;
    last_beat = -1;
    return;
  }
  fail(describe_loss(target, seconds_since(last_change)), /*post=*/true);
}

void PeerWatchdog::State::leave() {
  if (failed) return;  // the job is failing: nobody waits for this rank's goodbye
  try {
    request([&] { return store->add(left_key(rank), 1); });
    if (rank != 0) {
      if (!counted_gone.exchange(true)) request([&] { return store->add(kGoneKey, 1); });
      return;
    }
    // Rank 0 serves the store: keep it until every rank has left or seen rank 0 leave (they look
    // every interval), so that none takes the closing store for rank 0's death.
    const auto deadline = Clock::now() + 4 * opts.interval;
    while (request([&] { return store->add(kGoneKey, 0); }) < size - 1 && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  } catch (const std::exception&) {
    // The store is already gone: nothing to tell.
  }
}

PeerWatchdog::Blocked::Blocked(PeerWatchdog* w, std::string what) : s_(w ? w->state_ : nullptr) {
  if (!s_) return;
  std::lock_guard<std::mutex> lock(s_->mu);
  if (s_->blocked++ == 0) {
    s_->blocked_in = std::move(what);
    s_->blocked_since = Clock::now();
  }
}

PeerWatchdog::Blocked::~Blocked() {
  if (!s_) return;
  std::lock_guard<std::mutex> lock(s_->mu);
  --s_->blocked;
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
