#include "volt/distributed/launcher.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>

#include "volt/core/errors.h"

namespace volt {

namespace detail {

int launcher_death_signal() { return SIGRTMIN + 2; }

namespace {
// [Note: the launcher's death] A launched rank gets launcher_death_signal() when its launcher (the
// node's local rank 0, or its restart agent) dies (PR_SET_PDEATHSIG). The signal is blocked from fork
// on, so it waits, pending, until the rank installs the handler below (watch_launcher) and unblocks
// it. The handler writes one line naming the dead launcher, raises a flag and arms a 5 s alarm whose
// handler ends the rank (exit code 1), even if it is blocked. In those 5 s the rank's PeerWatchdog
// reads the flag (launcher_death()) and posts the death for every rank of the job, so ranks on other
// hosts learn which rank died instead of finding a whole node silent. The line is prepared before
// the handler is installed, in the only static buffers of this file: a handler can reach nothing
// else.
char g_launcher_died_line[200];
size_t g_launcher_died_len = 0;
volatile sig_atomic_t g_launcher_died = 0;

extern "C" void on_grace_over(int) { ::_exit(1); }

extern "C" void on_launcher_death(int) {
  // Delivered again as the orphan is reparented through the dying launcher's threads: the first
  // delivery says it and starts the grace, the others change nothing.
  if (g_launcher_died) return;
  g_launcher_died = 1;
  [[maybe_unused]] const ssize_t n = ::write(2, g_launcher_died_line, g_launcher_died_len);
  ::alarm(5);
}
}  // namespace

void watch_launcher(int64_t rank, int64_t local_rank, int64_t node) {
  const int sig = launcher_death_signal();
  const char* parent = std::getenv("VOLT_LAUNCHER_PID");
  const bool agent = std::getenv("VOLT_AGENT_PID") != nullptr;
  const std::string who = agent ? str_cat("the restart agent of node ", node)
                                : str_cat("rank ", rank - local_rank, " (volt's launcher on node ", node, ")");
  const int len = std::snprintf(g_launcher_died_line, sizeof g_launcher_died_line,
                                "[rank %lld] %s, pid %s, died; ending rank %lld\n", static_cast<long long>(rank),
                                who.c_str(), parent ? parent : "?", static_cast<long long>(rank));
  g_launcher_died_len = len > 0 ? std::min<size_t>(len, sizeof g_launcher_died_line - 1) : 0;
  struct sigaction grace {};
  grace.sa_handler = on_grace_over;
  sigemptyset(&grace.sa_mask);
  sigaction(SIGALRM, &grace, nullptr);
  struct sigaction sa {};
  sa.sa_handler = on_launcher_death;
  sa.sa_flags = SA_RESTART;  // a system call it interrupts goes on
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, nullptr);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  sigaddset(&set, SIGALRM);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  // Died before PR_SET_PDEATHSIG took effect: the signal never came.
  if (parent && ::getppid() != static_cast<pid_t>(std::atoll(parent))) on_launcher_death(sig);
}

std::string launcher_death() {
  if (!g_launcher_died) return "";
  std::string line(g_launcher_died_line, g_launcher_died_len);
  line.erase(0, line.find("] ") + 2);
  while (!line.empty() && line.back() == '\n') line.pop_back();
  return line;
}

std::vector<std::string> self_argv() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> out;
  std::string cur;
  for (char c; in.get(c);) {
    if (c == '\0') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

int64_t available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max<long>(1, sysconf(_SC_NPROCESSORS_ONLN));
}

void set_rank_environment(const LaunchPlan& plan, int64_t local_rank, int port, int64_t threads) {
  const int64_t world = plan.devices * plan.num_nodes;
  auto set = [](const char* k, const std::string& v) { ::setenv(k, v.c_str(), 1); };
  set("RANK", std::to_string(plan.node_rank * plan.devices + local_rank));
  set("LOCAL_RANK", std::to_string(local_rank));
  set("WORLD_SIZE", std::to_string(world));
  set("LOCAL_WORLD_SIZE", std::to_string(plan.devices));
  set("GROUP_RANK", std::to_string(plan.node_rank));
  set("GROUP_WORLD_SIZE", std::to_string(plan.num_nodes));
  set("MASTER_ADDR", plan.master_addr);
  set("MASTER_PORT", std::to_string(port));
  set("VOLT_LAUNCHED", "1");
  set("OMP_NUM_THREADS", std::to_string(threads));
}

pid_t spawn_self(const std::vector<std::string>& args, const std::string& what) {
  std::vector<char*> cargv;
  for (const auto& a : args) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  const pid_t parent = ::getpid();
  // Signals wait while the child still runs this process's handlers (a SIGINT that only set this
  // process's stop flag in the child's copy would be lost at exec).
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Child: default handlers, the launcher-death signal blocked until the rank watches for it
    // (detail::watch_launcher), everything else as before; never return into the parent's stack.
    for (int s : {SIGINT, SIGTERM}) ::signal(s, SIG_DFL);
    ::prctl(PR_SET_PDEATHSIG, launcher_death_signal());
    sigaddset(&old, launcher_death_signal());
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (::getppid() != parent) ::_exit(1);
    ::execv("/proc/self/exe", cargv.data());
    ::_exit(127);
  }
  const int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  VOLT_CHECK(pid >= 0, DistributedError, "fork failed for ", what, ": ", std::strerror(fork_errno));
  return pid;
}

std::string describe_exit(const std::string& who, pid_t pid, int st) {
  return WIFSIGNALED(st)
             ? str_cat(who, " (pid ", pid, ") was killed by signal ", WTERMSIG(st), " (", strsignal(WTERMSIG(st)), ")")
             : str_cat(who, " (pid ", pid, ") exited with code ", WEXITSTATUS(st));
}

}  // namespace detail

Launcher::Launcher(const LaunchPlan& plan) {
  VOLT_CHECK(plan.devices >= 1 && plan.num_nodes >= 1 && plan.devices * plan.num_nodes >= 2, DistributedError,
             "Launcher: devices x num_nodes must be >= 2, got ", plan.devices, " x ", plan.num_nodes);
  VOLT_CHECK(plan.node_rank >= 0 && plan.node_rank < plan.num_nodes, ConfigError, "node rank ", plan.node_rank,
             " is outside the job's ", plan.num_nodes,
             " nodes (trainer.num_nodes); give each node its own rank from 0 to num_nodes - 1");
  VOLT_CHECK(plan.num_nodes == 1 || plan.port > 0, ConfigError,
             "a job on several nodes needs the master's port on every node (MASTER_PORT or --master_port)");
  first_rank_ = plan.node_rank * plan.devices;
  env_.world_size = plan.devices * plan.num_nodes;
  env_.local_world_size = plan.devices;
  env_.rank = first_rank_;
  env_.local_rank = 0;
  env_.node_rank = plan.node_rank;
  env_.num_nodes = plan.num_nodes;
  env_.master_addr = plan.master_addr;
  env_.port = plan.port > 0 ? plan.port : detail::find_free_port();
  env_.port_given = true;
  env_.source = "volt";
  const int64_t threads = std::max<int64_t>(1, detail::available_cores() / plan.devices);
  const std::vector<std::string> argv = detail::self_argv();
  VOLT_CHECK(!argv.empty(), DistributedError, "Launcher: cannot read this process's command line");
  ::setenv("VOLT_LAUNCHER_PID", std::to_string(::getpid()).c_str(), 1);
  for (int64_t r = 1; r < plan.devices; ++r) {
    detail::set_rank_environment(plan, r, env_.port, threads);
    pids_.push_back(detail::spawn_self(argv, detail::str_cat("rank ", first_rank_ + r)));
  }
  detail::set_rank_environment(plan, 0, env_.port, threads);
  reaped_.assign(pids_.size(), false);
  status_.assign(pids_.size(), 0);
  torch::set_num_threads(static_cast<int>(threads));
  if (plan.devices > 1)
    spdlog::info(
        "Launched {} processes (ranks {}..{}) of node {} of {}; rendezvous at {}:{}, {} intra-op thread(s) each",
        plan.devices - 1, first_rank_ + 1, first_rank_ + plan.devices - 1, plan.node_rank, plan.num_nodes,
        env_.master_addr, env_.port, threads);
  else
    spdlog::info("Node {} of {}: this process is its one rank ({}); rendezvous at {}:{}, {} intra-op thread(s)",
                 plan.node_rank, plan.num_nodes, first_rank_, env_.master_addr, env_.port, threads);
  watchdog_ = std::thread([this] { watch(); });
}

void Launcher::watch() {
  while (!stop_.load()) {
    bool all_done = true;
    for (size_t i = 0; i < pids_.size(); ++i) {
      std::lock_guard<std::mutex> lock(mu_);
      if (reaped_[i]) continue;
      int st = 0;
      const pid_t r = ::waitpid(pids_[i], &st, WNOHANG);
      if (r == 0) {
        all_done = false;
        continue;
      }
      reaped_[i] = true;
      status_[i] = st;
      const bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
      if (!ok && failed_rank_.load() < 0) {
        failed_rank_ = first_rank_ + static_cast<int64_t>(i + 1);
        failure_ = detail::describe_exit(detail::str_cat("rank ", failed_rank_.load()), pids_[i], st);
        spdlog::error("{}; stopping the other ranks", failure_);
      }
    }
    if (failed_rank_.load() >= 0) {
      terminate_all(SIGTERM);
    }
    if (all_done) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void Launcher::kill_all() { terminate_all(SIGKILL); }

void Launcher::terminate_all(int sig) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < pids_.size(); ++i)
    if (!reaped_[i]) ::kill(pids_[i], sig);
}

std::string Launcher::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

void Launcher::wait_children() {
  if (watchdog_.joinable()) watchdog_.join();
  VOLT_CHECK(failed_rank_.load() < 0, DistributedError, failure());
}

Launcher::~Launcher() {
  // Give children a moment to finish on their own (normal exit), then stop any straggler. No grace
  // when a rank failed or when this process is unwinding from an error (a collective that timed
  // out, say): the others cannot finish without it and would only sit in their next collective.
  const bool graceful = failed_rank_.load() < 0 && std::uncaught_exceptions() == 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(graceful ? 30 : 0);
  while (std::chrono::steady_clock::now() < deadline) {
    bool all = true;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (bool r : reaped_) all = all && r;
    }
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  terminate_all(SIGTERM);
  stop_ = true;
  if (watchdog_.joinable()) watchdog_.join();
  for (size_t i = 0; i < pids_.size(); ++i) {
    if (reaped_[i]) continue;
    int st = 0;
    for (int k = 0; k < 40 && ::waitpid(pids_[i], &st, WNOHANG) == 0; ++k)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (::waitpid(pids_[i], &st, WNOHANG) == 0) {
      ::kill(pids_[i], SIGKILL);
      ::waitpid(pids_[i], &st, 0);
    }
  }
}

}  // namespace volt
