#include "volt/distributed/elastic_agent.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "volt/core/compat.h"
#include "volt/core/errors.h"
#include "volt/core/signals.h"
#include "volt/distributed/cluster_env.h"
#include "volt/distributed/rendezvous.h"

namespace volt {

namespace {
using Clock = std::chrono::steady_clock;

std::string key(int64_t attempt, const char* what) { return "attempt" + std::to_string(attempt) + "/" + what; }

std::string host_name() {
  char buf[256] = {};
  return ::gethostname(buf, sizeof buf - 1) == 0 ? std::string(buf) : std::string("?");
}

std::string get_string(c10d::Store& s, const std::string& k) {
  const auto v = s.get(k);
  return std::string(v.begin(), v.end());
}

/// How an attempt ended on this node.
enum class Outcome { Succeeded, RankFailed, Fatal };
}  // namespace

struct ElasticAgent::Impl {
  AgentOptions o;
  int64_t node = 0, nodes = 1;
  c10::intrusive_ptr<c10d::Store> store;
  std::unique_ptr<PeerWatchdog> watchdog;  // the agents' heartbeats; null on one node
  std::vector<pid_t> pids;                 // this attempt's ranks (index: local rank)
  std::vector<bool> running;
  std::vector<bool> stopped;  // a rank stopped (SIGSTOP) and not continued since
  std::string failure;        // this attempt's failure (the first posted by any node)
  std::string fatal;          // a reason no restart can mend
  bool fatal_config = false;  // ... a rank's configuration error (exit code 2): the agent exits 2 too

  void connect();
  /// Waits until `k` has reached `n` on every node; false (with `fatal` set) if an agent is lost.
  bool wait_count(const std::string& k, int64_t n, std::chrono::milliseconds timeout, const char* what);
  int attempt_port(int64_t k);
  void start_ranks(int64_t k, int port);
  Outcome watch(int64_t k);
  void post_failure(int64_t k, const std::string& what);
  /// A rank stopped or continued (waitpid's WUNTRACED / WCONTINUED): recorded in the store, so that
  /// the failure it leads to (a peer's heartbeat timeout, on any node) names it.
  void note_stopped(int64_t k, size_t i, int status);
  /// Tells every agent that the job ends without a restart (`fatal`), and reads such news.
  void post_fatal();
  bool fatal_posted();
  void stop_ranks();
  void reap(bool block);
  /// Says goodbye; node 0's agent, whose store the others use, waits (bounded) for every goodbye, so
  /// that no agent meets a closed store while it reads the job's end.
  void leave();
  std::string where() const { return detail::str_cat("node ", node, " (host ", host_name(), ")"); }
  /// The agents' watchdog counts them as ranks numbered by node.
  std::string agent_lost() const {
    return detail::str_cat("the restart agents lost one of theirs (agent 'rank' N is node N's agent): ",
                           watchdog->failure());
  }
};

void ElasticAgent::Impl::connect() {
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(o.plan.port);
  so.isServer = node == 0;
  so.numWorkers = static_cast<size_t>(nodes);
  so.waitWorkers = false;
  // Every request of an agent is short; a store that does not answer within the heartbeat timeout
  // (node 0's host down or cut off) fails the request instead of holding the agent (joins poll).
  so.timeout =
      std::max<std::chrono::milliseconds>(o.liveness.timeout, std::chrono::seconds(5)) + std::chrono::seconds(5);
  try {
    store = compat::make_tcp_store(o.plan.master_addr, so);
    if (nodes > 1) {
      LivenessOptions live = o.liveness;
      live.on_stuck = [](const std::string&) {};  // an agent is never blocked in a collective
      watchdog = std::make_unique<PeerWatchdog>(o.plan.master_addr, o.plan.port, node, nodes, live);
    }
  } catch (const std::exception& e) {
    const std::string m = e.what();
    throw DistributedError(detail::str_cat("restart agent of ", where(), ": cannot ", node == 0 ? "serve" : "reach",
                                           " the agents' store at ", o.plan.master_addr, ":", o.plan.port, ": ",
                                           m.substr(0, m.find('\n'))));
  }
}

bool ElasticAgent::Impl::wait_count(const std::string& k, int64_t n, std::chrono::milliseconds timeout,
                                    const char* what) {
  const auto start = Clock::now();
  Clock::duration next_report = std::chrono::seconds(10);
  for (;;) {
    if (store->add(k, 0) >= n) return true;
    if (fatal_posted()) return false;
    if (detail::ranks_joined(*store)) {
      // Not an agent but a rank: its node was started without restarts (or the agents' port is a
      // job's). Neither side would ever meet the other; both end now.
      fatal = detail::str_cat("a rank, not a restart agent, joined the agents' store at ", o.plan.master_addr, ":",
                              o.plan.port, ": every node must be started with the same trainer.max_restarts (",
                              o.max_restarts, " here)");
      fatal_config = true;
      detail::refuse_ranks(*store, "rendezvous: the process at MASTER_ADDR:MASTER_PORT is a restart agent (" + where() +
                                       ", trainer.max_restarts=" + std::to_string(o.max_restarts) +
                                       "): every node must be started with the same trainer.max_restarts");
      return false;
    }
    if (watchdog && watchdog->failed()) {
      fatal = agent_lost() + " while " + what;
      return false;
    }
    if (const int sig = detail::StopSignals::requested()) {
      fatal = detail::str_cat("the restart agent of ", where(), " was stopped by ", strsignal(sig), " while ", what);
      return false;
    }
    const auto waited = Clock::now() - start;
    if (waited > timeout) {
      fatal = detail::str_cat("only ", store->add(k, 0), " of ", n, " nodes' agents arrived within ",
                              std::chrono::duration_cast<std::chrono::seconds>(timeout).count(), " s while ", what);
      return false;
    }
    if (waited >= next_report) {  // after 10 s, then every 30 s, as a rank waiting for its peers
      spdlog::warn(
          "restart agent of {}: {} of {} nodes' agents have arrived at {}:{} after {} s ({}); start the "
          "others with the same trainer.num_nodes, --master_addr and --master_port, each with its "
          "--node_rank (this one gives up after {} s)",
          where(), store->add(k, 0), n, o.plan.master_addr, o.plan.port,
          std::chrono::duration_cast<std::chrono::seconds>(waited).count(), what,
          std::chrono::duration_cast<std::chrono::seconds>(timeout).count());
      next_report += std::chrono::seconds(30);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

int ElasticAgent::Impl::attempt_port(int64_t k) {
  const std::string pk = key(k, "port");
  if (node == 0) {
    const std::string p = std::to_string(detail::find_free_port());
    store->set(pk, std::vector<uint8_t>(p.begin(), p.end()));
  }
  while (!store->check({pk})) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return std::stoi(get_string(*store, pk));
}

void ElasticAgent::Impl::start_ranks(int64_t k, int port) {
  std::vector<std::string> args = o.argv;
  if (k > 0) args.insert(args.end(), o.restart_args.begin(), o.restart_args.end());
  const int64_t threads = std::max<int64_t>(1, detail::available_cores() / o.plan.devices);
  ::setenv("VOLT_LAUNCHER_PID", std::to_string(::getpid()).c_str(), 1);
  ::setenv("VOLT_AGENT_PID", std::to_string(::getpid()).c_str(), 1);
  ::setenv("TORCHELASTIC_RESTART_COUNT", std::to_string(k).c_str(), 1);
  ::setenv("TORCHELASTIC_MAX_RESTARTS", std::to_string(o.max_restarts).c_str(), 1);
  pids.clear();
  running.clear();
  stopped.clear();
  for (int64_t r = 0; r < o.plan.devices; ++r) {
    detail::set_rank_environment(o.plan, r, port, threads);
    pids.push_back(detail::spawn_self(args, detail::str_cat("rank ", o.plan.node_rank * o.plan.devices + r)));
    running.push_back(true);
    stopped.push_back(false);
  }
}

void ElasticAgent::Impl::note_stopped(int64_t k, size_t i, int status) {
  const int64_t rank = o.plan.node_rank * o.plan.devices + static_cast<int64_t>(i);
  const std::string k_note = key(k, "stopped_rank");
  try {
    if (WIFSTOPPED(status)) {
      stopped[i] = true;
      const std::string note = detail::str_cat(where(), ": rank ", rank, " (pid ", pids[i], ") was stopped by ",
                                               strsignal(WSTOPSIG(status)));
      store->compareSet(k_note, {}, std::vector<uint8_t>(note.begin(), note.end()));  // the first stop wins
    } else if (stopped[i]) {                                                          // continued: no longer a suspect
      stopped[i] = false;
      if (store->check({k_note}) &&
          get_string(*store, k_note).find(detail::str_cat(": rank ", rank, " (pid ", pids[i], ")")) !=
              std::string::npos)
        store->deleteKey(k_note);
    }
  } catch (const std::exception&) {  // the store is gone: the failure says so
  }
}

void ElasticAgent::Impl::post_failure(int64_t k, const std::string& what) {
  std::string desc = detail::str_cat(where(), ": ", what);
  // A rank that stopped (SIGSTOP, a debugger) makes its peers fail (no heartbeat) without failing
  // itself: it is the cause, whichever exit is seen first.
  try {
    const std::string k_note = key(k, "stopped_rank");
    if (store->check({k_note})) desc = detail::str_cat(get_string(*store, k_note), ", then ", desc);
  } catch (const std::exception&) {
  }
  const std::vector<uint8_t> v(desc.begin(), desc.end());
  try {
    store->compareSet(key(k, "failed"), {}, v);  // the first post wins
  } catch (const std::exception&) {
  }
  if (failure.empty()) failure = desc;
}

void ElasticAgent::Impl::post_fatal() {
  try {
    const std::vector<uint8_t> v(fatal.begin(), fatal.end());
    store->compareSet("fatal", {}, v);
  } catch (const std::exception&) {  // the store is gone: the other agents see that instead
  }
}

bool ElasticAgent::Impl::fatal_posted() {
  if (!store->check({"fatal"})) return false;
  fatal = get_string(*store, "fatal");
  return true;
}

void ElasticAgent::Impl::reap(bool block) {
  for (size_t i = 0; i < pids.size(); ++i) {
    if (!running[i]) continue;
    int st = 0;
    if (::waitpid(pids[i], &st, block ? 0 : WNOHANG) == pids[i]) running[i] = false;
  }
}

void ElasticAgent::Impl::stop_ranks() {
  for (size_t i = 0; i < pids.size(); ++i)
    if (running[i]) {
      ::kill(pids[i], SIGTERM);
      ::kill(pids[i], SIGCONT);  // a stopped rank handles it now, not at the SIGKILL
    }
  const auto deadline = Clock::now() + o.stop_grace;
  while (Clock::now() < deadline) {
    reap(false);
    bool any = false;
    for (bool r : running) any = any || r;
    if (!any) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (size_t i = 0; i < pids.size(); ++i)
    if (running[i]) ::kill(pids[i], SIGKILL);
  reap(true);
}

void ElasticAgent::Impl::leave() {
  try {
    store->add("left", 1);
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (node == 0 && store->add("left", 0) < nodes && Clock::now() < deadline) {
      if (watchdog && watchdog->failed()) return;  // a lost agent never says goodbye
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  } catch (const std::exception&) {  // the store is gone: nobody is left to wait for
  }
}

Outcome ElasticAgent::Impl::watch(int64_t k) {
  const int64_t first = o.plan.node_rank * o.plan.devices;
  bool done_posted = false;
  for (int tick = 0;; ++tick) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (!running[i]) continue;
      int st = 0;
      if (::waitpid(pids[i], &st, WNOHANG | WUNTRACED | WCONTINUED) != pids[i]) continue;
      if (WIFSTOPPED(st) || WIFCONTINUED(st)) {
        note_stopped(k, i, st);
        continue;
      }
      running[i] = false;
      if (WIFEXITED(st) && WEXITSTATUS(st) == 0) continue;
      post_failure(k, detail::describe_exit(detail::str_cat("rank ", first + static_cast<int64_t>(i)), pids[i], st));
      // Exit code 2 is a configuration error (volt's CLI): the next attempt would meet it again.
      if (WIFEXITED(st) && WEXITSTATUS(st) == 2) {
        fatal = failure + " (a configuration error: a restart would meet it again)";
        fatal_config = true;
        return Outcome::Fatal;
      }
    }
    if (const int sig = detail::StopSignals::requested()) {
      fatal = detail::str_cat("the restart agent of ", where(), " was stopped by ", strsignal(sig));
      post_failure(k, fatal);
      return Outcome::Fatal;
    }
    if (!failure.empty()) return Outcome::RankFailed;
    if (tick % 5 == 0) {  // the store every 100 ms
      if (watchdog && watchdog->failed()) {
        fatal = agent_lost();
        return Outcome::Fatal;
      }
      if (fatal_posted()) return Outcome::Fatal;
      if (store->check({key(k, "failed")})) {
        failure = get_string(*store, key(k, "failed"));
        return Outcome::RankFailed;
      }
      bool any = false;
      for (bool r : running) any = any || r;
      if (!any && !done_posted) {
        store->add(key(k, "done"), 1);
        done_posted = true;
      }
      if (done_posted && store->add(key(k, "done"), 0) >= nodes) return Outcome::Succeeded;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

ElasticAgent::ElasticAgent(AgentOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.o = std::move(options);
  if (s.o.argv.empty()) s.o.argv = detail::self_argv();
  VOLT_CHECK(!s.o.argv.empty(), DistributedError, "restart agent: cannot read this process's command line");
  VOLT_CHECK(s.o.plan.devices >= 1 && s.o.plan.num_nodes >= 1 && s.o.plan.node_rank >= 0 &&
                 s.o.plan.node_rank < s.o.plan.num_nodes,
             ConfigError, "restart agent: node rank ", s.o.plan.node_rank, " of ", s.o.plan.num_nodes, " nodes with ",
             s.o.plan.devices, " devices does not add up");
  VOLT_CHECK(s.o.plan.num_nodes == 1 || s.o.plan.port > 0, ConfigError,
             "restart agent: a job on several nodes needs MASTER_PORT (or --master_port) on every node");
  s.node = s.o.plan.node_rank;
  s.nodes = s.o.plan.num_nodes;
  if (s.o.plan.port <= 0) s.o.plan.port = detail::find_free_port();
}

ElasticAgent::~ElasticAgent() {
  for (size_t i = 0; i < impl_->pids.size(); ++i)
    if (impl_->running[i]) ::kill(impl_->pids[i], SIGKILL);
  impl_->reap(true);
}

int ElasticAgent::run() {
  Impl& s = *impl_;
  detail::StopSignals signals;  // SIGINT / SIGTERM: stop the ranks, no restart
  s.connect();
  spdlog::info("restart agent of {}: {} rank(s) here, up to {} restart(s); agents meet at {}:{}", s.where(),
               s.o.plan.devices, s.o.max_restarts, s.o.plan.master_addr, s.o.plan.port);
  std::vector<std::string> failures;
  try {
    const bool ok = attempts(failures);
    s.leave();
    if (ok) return 0;
  } catch (const std::exception& e) {
    // A store request that failed: node 0's agent (and its store) is gone or unreachable.
    const std::string m = e.what();
    s.fatal = detail::str_cat(
        "restart agent of ", s.where(), ": the agents' store at ", s.o.plan.master_addr, ":", s.o.plan.port,
        " stopped answering (node 0's agent died, or its host is down or cut off): ", m.substr(0, m.find('\n')));
    s.stop_ranks();
  }
  std::string list;
  for (size_t i = 0; i < failures.size(); ++i) list += detail::str_cat(i ? ";" : "", " (", i + 1, ") ", failures[i]);
  if (!s.fatal.empty()) {
    const std::string m =
        detail::str_cat(s.fatal, "; the job ends without a restart. Failures:", list.empty() ? " none" : list);
    if (s.fatal_config) throw ConfigError(m);  // exit code 2, as the rank's
    throw DistributedError(m);
  }
  throw DistributedError(detail::str_cat("the job failed ", failures.size(),
                                         " time(s), more than trainer.max_restarts=", s.o.max_restarts,
                                         " allows:", list));
}

bool ElasticAgent::attempts(std::vector<std::string>& failures) {
  Impl& s = *impl_;
  for (int64_t k = 0; k <= s.o.max_restarts; ++k) {
    s.failure.clear();
    s.store->add(key(k, "joined"), 1);
    if (!s.wait_count(key(k, "joined"), s.nodes, s.o.join_timeout, "starting an attempt")) {
      s.post_fatal();  // the agents still waiting learn why, instead of losing this one
      break;
    }
    s.start_ranks(k, s.attempt_port(k));
    const Outcome out = s.watch(k);
    if (out == Outcome::Succeeded) {
      if (k > 0) spdlog::info("restart agent of {}: the job finished after {} restart(s)", s.where(), k);
      return true;
    }
    s.stop_ranks();
    if (out == Outcome::Fatal) {
      if (!s.failure.empty()) failures.push_back(s.failure);
      s.post_fatal();
      break;
    }
    failures.push_back(s.failure);
    s.store->add(key(k, "stopped"), 1);
    if (!s.wait_count(key(k, "stopped"), s.nodes, s.o.stop_grace + s.o.join_timeout, "stopping the ranks")) {
      s.post_fatal();
      break;
    }
    if (k < s.o.max_restarts)
      spdlog::warn("restart {} of {}: {}; every rank was stopped, resuming from the last checkpoint", k + 1,
                   s.o.max_restarts, s.failure);
  }
  return false;
}

std::optional<int> run_elastic(int64_t max_restarts, int64_t devices, int64_t num_nodes,
                               std::vector<std::string> restart_args) {
  const ClusterEnv env = ClusterEnv::detect();
  if (std::getenv("VOLT_AGENT_PID") && env.source == "volt") {
    detail::watch_launcher(env.rank, env.local_rank,
                           env.node_rank);  // the agent's death (even before now) ends this rank at once
    return std::nullopt;
  }
  if (max_restarts == 0) return std::nullopt;
  VOLT_CHECK(env.source == "none", ConfigError, "config key 'trainer.max_restarts': volt restarts only the ranks it ",
             "launches itself, and this process was started by ", env.source,
             "; use the launcher's own restarts (torchrun --max-restarts, SLURM --requeue) with ckpt_path: last");
  AgentOptions o;
  o.plan.devices = devices;
  o.plan.num_nodes = num_nodes;
  o.plan.node_rank = env.node_rank;
  o.plan.master_addr = env.master_addr;
  o.plan.port = env.port_given ? env.port : 0;
  o.max_restarts = max_restarts;
  o.restart_args = std::move(restart_args);
  o.liveness = LivenessOptions::from_env();
  VOLT_CHECK(num_nodes == 1 || std::getenv("MASTER_ADDR"), ConfigError, "trainer.num_nodes=", num_nodes,
             " without torchrun or SLURM: run one command per node with --node_rank=N --master_addr=ADDR "
             "--master_port=PORT");
  try {
    return ElasticAgent(std::move(o)).run();
  } catch (const DistributedError& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
}

}  // namespace volt
