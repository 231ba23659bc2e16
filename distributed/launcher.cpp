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
// [Note: the launcher's death] A launched rank gets launcher_death_signal() when rank 0 (its
// launcher) dies (PR_SET_PDEATHSIG). The signal is blocked from fork on, so it waits, pending,
// until the rank installs the handler below (watch_launcher) and unblocks it; the handler writes one
// line naming the dead launcher and ends the rank. The line is prepared before the handler is
// installed, in the only static buffer of this file: a handler can reach nothing else.
char g_launcher_died_line[160];
size_t g_launcher_died_len = 0;

extern "C" void on_launcher_death(int) {
  [[maybe_unused]] const ssize_t n = ::write(2, g_launcher_died_line, g_launcher_died_len);
  ::_exit(1);
}
}  // namespace

void watch_launcher(int64_t rank) {
  const int sig = launcher_death_signal();
  const char* parent = std::getenv("VOLT_LAUNCHER_PID");
  const int len = std::snprintf(g_launcher_died_line, sizeof g_launcher_died_line,
                                "[rank %lld] rank 0 (volt's launcher, pid %s) died; ending rank %lld\n",
                                static_cast<long long>(rank), parent ? parent : "?", static_cast<long long>(rank));
  g_launcher_died_len = len > 0 ? std::min<size_t>(len, sizeof g_launcher_died_line - 1) : 0;
  struct sigaction sa {};
  sa.sa_handler = on_launcher_death;
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, nullptr);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  // Died before PR_SET_PDEATHSIG took effect: the signal never came.
  if (parent && ::getppid() != static_cast<pid_t>(std::atoll(parent))) on_launcher_death(sig);
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

}  // namespace detail

Launcher::Launcher(int64_t world_size) {
  VOLT_CHECK(world_size >= 2, DistributedError, "Launcher: world size must be >= 2");
  env_.world_size = env_.local_world_size = world_size;
  env_.rank = env_.local_rank = 0;
  env_.master_addr = "127.0.0.1";
  env_.port = detail::find_free_port();
  env_.source = "volt";
  const int64_t threads = std::max<int64_t>(1, detail::available_cores() / world_size);
  const std::string exe = "/proc/self/exe";
  const std::vector<std::string> argv = detail::self_argv();
  VOLT_CHECK(!argv.empty(), DistributedError, "Launcher: cannot read this process's command line");
  const pid_t parent = ::getpid();

  auto set_common = [&](int64_t rank) {
    ::setenv("RANK", std::to_string(rank).c_str(), 1);
    ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
    ::setenv("WORLD_SIZE", std::to_string(world_size).c_str(), 1);
    ::setenv("LOCAL_WORLD_SIZE", std::to_string(world_size).c_str(), 1);
    ::setenv("MASTER_ADDR", env_.master_addr.c_str(), 1);
    ::setenv("MASTER_PORT", std::to_string(env_.port).c_str(), 1);
    ::setenv("VOLT_LAUNCHED", "1", 1);
    ::setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 1);
  };
  ::setenv("VOLT_LAUNCHER_PID", std::to_string(parent).c_str(), 1);
  for (int64_t r = 1; r < world_size; ++r) {
    set_common(r);
    std::vector<char*> cargv;
    for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
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
      ::prctl(PR_SET_PDEATHSIG, detail::launcher_death_signal());
      sigaddset(&old, detail::launcher_death_signal());
      pthread_sigmask(SIG_SETMASK, &old, nullptr);
      if (::getppid() != parent) ::_exit(1);
      ::execv(exe.c_str(), cargv.data());
      ::_exit(127);
    }
    const int fork_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    VOLT_CHECK(pid >= 0, DistributedError, "Launcher: fork failed for rank ", r, ": ", std::strerror(fork_errno));
    pids_.push_back(pid);
  }
  set_common(0);
  reaped_.assign(pids_.size(), false);
  status_.assign(pids_.size(), 0);
  torch::set_num_threads(static_cast<int>(threads));
  spdlog::info("Launched {} processes (ranks 1..{}) on 127.0.0.1:{}, {} intra-op thread(s) each", world_size - 1,
               world_size - 1, env_.port, threads);
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
        failed_rank_ = static_cast<int64_t>(i + 1);
        failure_ = WIFSIGNALED(st)
                       ? detail::str_cat("rank ", i + 1, " (pid ", pids_[i], ") was killed by signal ", WTERMSIG(st),
                                         " (", strsignal(WTERMSIG(st)), ")")
                       : detail::str_cat("rank ", i + 1, " (pid ", pids_[i], ") exited with code ", WEXITSTATUS(st));
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
