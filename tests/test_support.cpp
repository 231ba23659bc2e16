#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "boring_model.h"
#include "volt/core/files.h"

namespace volt::testing {

std::string temp_dir(const std::string& tag) {
  static std::atomic<int> counter{0};
  auto p = std::filesystem::temp_directory_path() /
           ("volt-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  volt::detail::remove_tree(p.string());
  std::filesystem::create_directories(p);
  return p.string();
}

long dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int st = 0;
  ::waitpid(pid, &st, 0);
  return static_cast<long>(pid);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<int> run_processes(const std::vector<std::vector<std::string>>& argvs,
                               const std::vector<std::map<std::string, std::string>>& envs, int timeout_s,
                               const std::string& log_prefix, int until) {
  std::vector<pid_t> pids;
  for (size_t i = 0; i < argvs.size(); ++i) {
    const std::string log = log_prefix + "." + std::to_string(i) + ".log";
    pid_t pid = ::fork();
    if (pid == 0) {
      // Own process group, so a timeout can stop the process and everything it launched.
      ::setpgid(0, 0);
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      if (i < envs.size())
        for (const auto& [k, v] : envs[i]) ::setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> a;
      for (const auto& s : argvs[i]) a.push_back(const_cast<char*>(s.c_str()));
      a.push_back(nullptr);
      ::execv(a[0], a.data());
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes(pids.size(), -1);
  std::vector<bool> done(pids.size(), false);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  size_t left = pids.size();
  while (left > 0 && std::chrono::steady_clock::now() < deadline && !(until >= 0 && done[until])) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      int st = 0;
      if (::waitpid(pids[i], &st, WNOHANG) == pids[i]) {
        done[i] = true;
        --left;
        codes[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (size_t i = 0; i < pids.size(); ++i) {
    if (done[i]) continue;
    ::kill(-pids[i], SIGKILL);
    ::waitpid(pids[i], nullptr, 0);
  }
  return codes;
}

}  // namespace volt::testing
