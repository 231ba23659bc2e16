#pragma once
// What the CPU benchmarks share: resident-memory readings from /proc, a median, and running this
// benchmark again as a child process per configuration (each configuration gets its own peak).
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "volt/trainer/trainer_options.h"

namespace volt::bench {

/// A "VmXXX:" field of /proc/self/status in bytes, or -1.
inline double proc_status_bytes(const char* key) {
  std::ifstream in("/proc/self/status");
  const size_t n = std::strlen(key);
  for (std::string line; std::getline(in, line);)
    if (line.compare(0, n, key) == 0) return std::stod(line.substr(n)) * 1024.0;  // "  123456 kB"
  return -1;
}
/// "1,2,4" -> {"1", "2", "4"} (empty items dropped): list-valued command-line options.
inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

inline double rss_bytes() { return proc_status_bytes("VmRSS:"); }
inline double hwm_bytes() { return proc_status_bytes("VmHWM:"); }

/// Resets VmHWM to the current RSS ("5" > /proc/self/clear_refs, Linux >= 4.0). False if refused or
/// without effect (some sandboxes accept the write and keep the old peak).
inline bool reset_peak() {
  FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  const bool ok = std::fputs("5", f) >= 0;
  if (std::fclose(f) != 0 || !ok) return false;
  return hwm_bytes() <= rss_bytes() + 16.0 * 1024 * 1024;
}

/// Large allocations go straight to mmap and freed ones back to the OS, so RSS follows live tensors.
inline void track_live_memory() {
  ::mallopt(M_MMAP_THRESHOLD, 256 * 1024);
  ::mallopt(M_TRIM_THRESHOLD, 1024 * 1024);
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// Trainer options for a measurement: no progress bar, model summary, checkpoints, logger or
/// sanity validation; `steps` optimizer steps, seeded.
inline TrainerOptions quiet_trainer_options(int64_t steps) {
  TrainerOptions t;
  t.max_steps = steps;
  t.enable_progress_bar = false;
  t.enable_model_summary = false;
  t.enable_checkpointing = false;
  t.logger = false;
  t.num_sanity_val_steps = 0;
  t.seed = 1;
  return t;
}

/// Runs this executable again with its own arguments plus `extra`; returns the exit code (128 +
/// signal when killed, -1 when it could not start).
inline int spawn_self(char** argv, int argc, const std::vector<std::string>& extra) {
  std::vector<std::string> args(argv, argv + argc);
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> cargv;
  for (auto& s : args) cargv.push_back(s.data());
  cargv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    ::execv("/proc/self/exe", cargv.data());
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

}  // namespace volt::bench
