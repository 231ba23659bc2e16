#include "volt/distributed/rendezvous.h"

#include <spdlog/spdlog.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <optional>
#include <sstream>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

#include "volt/core/compat.h"
#include "volt/core/config_diff.h"
#include "volt/core/errors.h"
#include "volt/core/signals.h"
#include "volt/distributed/peer_watchdog.h"

namespace volt::detail {

namespace {
const char* const kJoinedKey = "volt_joined";    // every rank adds 1 once connected
const char* const kViewsKey = "volt_views";      // the number of views published
const char* const kVerdictKey = "volt_verdict";  // rank 0's "ok", or the conflict it found
std::string claim_key(int64_t rank) { return "volt_claim/" + std::to_string(rank); }
std::string claimant_key(int64_t rank) { return "volt_claimant/" + std::to_string(rank); }
std::string view_key(int64_t i) { return "volt_view/" + std::to_string(i); }
std::string where_key(int64_t rank) { return "volt_where/" + std::to_string(rank); }
std::string config_key(int64_t rank) { return "volt_config/" + std::to_string(rank); }
// A verdict that is a configuration error (ConfigError on every rank, not DistributedError).
const std::string kConfigVerdict = "config: ";

bool is_config_verdict(const std::string& v) { return v.rfind(kConfigVerdict, 0) == 0; }

std::string host_name() {
  char buf[256] = {};
  return ::gethostname(buf, sizeof buf - 1) == 0 ? std::string(buf) : std::string("?");
}

/// What one process says of itself: "rank world node pid host".
struct View {
  int64_t rank = 0, world = 0, node = 0, pid = 0;
  std::string host;
  std::string encode() const { return str_cat(rank, " ", world, " ", node, " ", pid, " ", host); }
  static View decode(const std::string& s) {
    View v;
    std::istringstream in(s);
    in >> v.rank >> v.world >> v.node >> v.pid >> v.host;
    return v;
  }
  std::string who() const { return str_cat("rank ", rank, " (pid ", pid, " on host ", host, ", node ", node, ")"); }
};

std::string get_string(c10d::Store& store, const std::string& key) {
  const auto v = store.get(key);
  return std::string(v.begin(), v.end());
}
void set_string(c10d::Store& store, const std::string& key, const std::string& value) {
  store.set(key, std::vector<uint8_t>(value.begin(), value.end()));
}

/// A second process with this rank fails at once, naming the first.
void claim_rank(c10d::Store& store, const View& me, PeerWatchdog* watchdog) {
  if (store.add(claim_key(me.rank), 1) == 1) {
    set_string(store, claimant_key(me.rank), me.encode());
    return;
  }
  std::optional<View> first;
  if (store.check({claimant_key(me.rank)})) first = View::decode(get_string(store, claimant_key(me.rank)));
  std::string msg = str_cat("RANK=", me.rank, " is claimed twice: by ", first ? first->who() : "another process",
                            " and by pid ", me.pid, " on host ", me.host);
  // Nodes started with other devices (or num_nodes) number their ranks from other bases: the
  // duplicate is a symptom, the world sizes are the cause.
  if (first && first->world != me.world)
    msg += str_cat(", which have WORLD_SIZE=", first->world, " and ", me.world,
                   ": every node must be started with the same trainer.devices and num_nodes");
  else
    msg += "; every process of the job needs its own RANK";
  if (watchdog) watchdog->report(msg);
  throw DistributedError(msg);
}

/// Rank 0: the first difference between rank `rank`'s job config and `mine` ("" if none, or if
/// that rank gave none).
std::string config_conflict(c10d::Store& store, int64_t rank, const std::string& mine) {
  if (mine.empty() || !store.check({config_key(rank)})) return "";
  const std::string theirs = get_string(store, config_key(rank));
  if (theirs == mine) return "";
  const std::string diff = first_difference(YAML::Load(theirs), YAML::Load(mine), rank);
  return diff.empty() ? diff
                      : str_cat(kConfigVerdict, diff,
                                ": every rank of a job must be started with the same config; start every node with "
                                "the same config");
}

/// Rank 0: checks the views published since `seen`; returns the conflict found ("" if none; a
/// configuration conflict starts with kConfigVerdict).
std::string check_views(c10d::Store& store, const View& me, int64_t& seen, const std::string& job_config) {
  const int64_t n = store.add(kViewsKey, 0);
  for (; seen < n; ++seen) {
    if (!store.check({view_key(seen)})) break;  // counted, not written yet: next time
    const View v = View::decode(get_string(store, view_key(seen)));
    if (v.world != me.world)
      return str_cat(v.who(), " has WORLD_SIZE=", v.world, " but ", me.who(), " has WORLD_SIZE=", me.world,
                     "; start every rank with the same WORLD_SIZE");
    if (v.rank == 0 && v.pid != me.pid)
      return str_cat(v.who(), " also says RANK=0; every process of the job needs its own RANK");
    if (v.rank != 0) {
      std::string conflict = config_conflict(store, v.rank, job_config);
      if (!conflict.empty()) return conflict;
    }
  }
  return "";
}

/// Rank 0, while it waits: which ranks have not joined, so that a node never started is seen long
/// before the timeout (30 minutes by default).
void report_missing(c10d::Store& store, const View& me, int64_t joined, std::chrono::steady_clock::duration waited,
                    std::chrono::milliseconds timeout) {
  std::vector<int64_t> missing;
  for (int64_t r = 1; r < me.world && missing.size() < 9; ++r)
    if (!store.check({claimant_key(r)})) missing.push_back(r);
  std::string list;
  for (size_t i = 0; i < missing.size() && i < 8; ++i) list += (i ? ", " : "") + std::to_string(missing[i]);
  if (missing.size() > 8) list += ", ...";
  spdlog::warn(
      "rendezvous: {} of {} other ranks joined in {} s; waiting for rank(s) {} (every node started with "
      "the same num_nodes, master_addr and master_port?); giving up after {} s",
      joined, me.world - 1, std::chrono::duration_cast<std::chrono::seconds>(waited).count(), list,
      timeout.count() / 1000);
}

void wait_for_ranks(c10d::Store& store, const View& me, std::chrono::milliseconds timeout,
                    const std::function<std::string()>& peer_failure, PeerWatchdog* watchdog,
                    const std::string& job_config) {
  const auto start = std::chrono::steady_clock::now();
  auto next_report = start + std::chrono::seconds(10);
  int64_t seen = 0;
  for (;;) {
    const int64_t joined = store.add(kJoinedKey, 0) - 1;  // the others
    const std::string conflict = check_views(store, me, seen, job_config);
    if (is_config_verdict(conflict)) throw ConfigError(conflict.substr(kConfigVerdict.size()));
    VOLT_CHECK(conflict.empty(), DistributedError, "rendezvous: ", conflict);
    // A restart agent of another node found this rank's store (refuse_ranks).
    if (store.check({kVerdictKey})) throw DistributedError(get_string(store, kVerdictKey));
    if (joined >= me.world - 1 && seen >= store.add(kViewsKey, 0)) break;
    std::string failure = peer_failure ? peer_failure() : std::string();
    if (failure.empty() && watchdog) failure = watchdog->failure();
    VOLT_CHECK(failure.empty(), DistributedError, "rendezvous: ", failure, " before joining (", joined, " of ",
               me.world - 1, " other ranks had joined); stopping");
    VOLT_CHECK(std::chrono::steady_clock::now() - start < timeout, DistributedError, "rendezvous: only ", joined,
               " of ", me.world - 1, " other ranks joined within the timeout (", timeout.count() / 1000, " s)");
    if (std::chrono::steady_clock::now() >= next_report) {
      report_missing(store, me, joined, std::chrono::steady_clock::now() - start, timeout);
      next_report += std::chrono::seconds(30);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void wait_for_verdict(c10d::Store& store, const View& me, std::chrono::milliseconds timeout, PeerWatchdog* watchdog) {
  const auto start = std::chrono::steady_clock::now();
  while (!store.check({kVerdictKey})) {
    if (watchdog) watchdog->check(str_cat("rendezvous of rank ", me.rank));
    VOLT_CHECK(std::chrono::steady_clock::now() - start < timeout, DistributedError,
               "rendezvous: rank 0 did not confirm the world of ", me.world, " ranks within the timeout (",
               timeout.count() / 1000, " s); are all ranks started, with the same MASTER_ADDR and MASTER_PORT?");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const std::string verdict = get_string(store, kVerdictKey);
  if (is_config_verdict(verdict)) throw ConfigError(verdict.substr(kConfigVerdict.size()));
  VOLT_CHECK(verdict == "ok", DistributedError, verdict);
}
}  // namespace

namespace {
/// A client's connect retries in silence until its timeout (trainer.strategy.timeout, 30 minutes by
/// default): made in slices of 2 s, it says whom it waits for (after 10 s, then every 30 s, as
/// agree_on_world does once connected) and ends on a stop signal (the first SIGINT / SIGTERM).
c10::intrusive_ptr<c10d::Store> connect_client(const ClusterEnv& env, c10d::TCPStoreOptions so,
                                               std::chrono::milliseconds timeout) {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  const auto start = std::chrono::steady_clock::now();
  milliseconds next_report = std::chrono::seconds(10);
  for (;;) {
    const auto waited = duration_cast<milliseconds>(std::chrono::steady_clock::now() - start);
    so.timeout = std::max(milliseconds(1), std::min<milliseconds>(std::chrono::seconds(2), timeout - waited));
    try {
      auto store = compat::make_tcp_store(env.master_addr, so);
      store->setTimeout(timeout);
      return store;
    } catch (const std::exception& e) {
      std::string what = e.what();
      std::transform(what.begin(), what.end(), what.begin(), [](unsigned char c) { return std::tolower(c); });
      const auto now = duration_cast<milliseconds>(std::chrono::steady_clock::now() - start);
      if (what.find("timed out") == std::string::npos || now >= timeout) throw;
      if (const int sig = StopSignals::requested())
        throw DistributedError(str_cat("rank ", env.rank, " (node ", env.node_rank, "): stopped by ", strsignal(sig),
                                       " while waiting for the rendezvous store at ", env.master_addr, ":", env.port));
      if (now >= next_report) {
        spdlog::warn(
            "rank {} (node {}): no rendezvous store answers at {}:{} after {} s: is rank 0 (node 0) started, with the "
            "same MASTER_ADDR and MASTER_PORT? (waiting up to {} s, trainer.strategy.timeout)",
            env.rank, env.node_rank, env.master_addr, env.port, (now.count() + 500) / 1000, timeout.count() / 1000);
        next_report += std::chrono::seconds(30);
      }
    }
  }
}
}  // namespace

c10::intrusive_ptr<c10d::Store> connect_store(const ClusterEnv& env, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(env.port);
  so.isServer = env.rank == 0;
  so.numWorkers = static_cast<size_t>(env.world_size);
  so.waitWorkers = false;  // agree_on_world waits, watching for failures
  so.timeout = timeout;
  if (!so.isServer) return connect_client(env, so, timeout);
  try {
    return compat::make_tcp_store(env.master_addr, so);
  } catch (const std::exception& e) {
    std::string what = e.what();
    std::transform(what.begin(), what.end(), what.begin(), [](unsigned char c) { return std::tolower(c); });
    const bool in_use =
        what.find("address already in use") != std::string::npos || what.find("eaddrinuse") != std::string::npos;
    // Rank 0 serves the store: its port taken is another job's, or a second process given RANK=0.
    VOLT_CHECK(!(so.isServer && in_use), DistributedError, "rank 0 cannot serve the rendezvous store on port ",
               env.port,
               ": the port is in use (another job, or a second process started with RANK=0 for this job); "
               "give the job a free MASTER_PORT and start exactly one process with RANK=0");
    throw;
  }
}

void agree_on_world(c10d::Store& store, const ClusterEnv& env, const std::string& address,
                    std::chrono::milliseconds timeout, const std::function<std::string()>& peer_failure,
                    PeerWatchdog* watchdog, const std::string& job_config) {
  View me;
  me.rank = env.rank;
  me.world = env.world_size;
  me.node = env.node_rank;
  me.pid = ::getpid();
  me.host = host_name();
  claim_rank(store, me, watchdog);
  set_string(store, where_key(me.rank), str_cat(me.node, " ", me.host, address.empty() ? "" : " (" + address + ")"));
  if (!job_config.empty()) set_string(store, config_key(me.rank), job_config);  // before the view
  const int64_t index = store.add(kViewsKey, 1) - 1;
  set_string(store, view_key(index), me.encode());
  store.add(kJoinedKey, 1);
  if (env.rank != 0) {
    wait_for_verdict(store, me, timeout, watchdog);
    return;
  }
  try {
    wait_for_ranks(store, me, timeout, peer_failure, watchdog, job_config);
  } catch (const ConfigError& e) {
    try {
      set_string(store, kVerdictKey, kConfigVerdict + e.what());
    } catch (const std::exception&) {
    }
    throw;
  } catch (const DistributedError& e) {
    try {
      set_string(store, kVerdictKey, str_cat(e.what(), " (seen by rank 0)"));
    } catch (const std::exception&) {  // the error at hand is the one to report
    }
    throw;
  }
  set_string(store, kVerdictKey, "ok");
}

bool ranks_joined(c10d::Store& store) { return store.check({kJoinedKey}); }

void refuse_ranks(c10d::Store& store, const std::string& reason) { set_string(store, kVerdictKey, reason); }

std::vector<RankPlace> read_layout(c10d::Store& store, int64_t world_size) {
  std::vector<RankPlace> out(static_cast<size_t>(world_size));
  for (int64_t r = 0; r < world_size; ++r) {
    const std::string s = get_string(store, where_key(r));
    const auto space = s.find(' ');
    out[r].node = std::stoll(s.substr(0, space));
    out[r].host = space == std::string::npos ? "?" : s.substr(space + 1);
  }
  return out;
}

}  // namespace volt::detail
