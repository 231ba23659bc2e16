#include "volt/trainer/slurm_requeue.h"

#include <spawn.h>
#include <sys/wait.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <regex>

#include "volt/core/errors.h"

extern char** environ;

namespace volt {

int SLURMOptions::active_signal() const {
  if (!auto_requeue || detail::slurm_batch_job_id().empty()) return 0;
  return requeue_signal.value() == RequeueSignal::Usr2 ? SIGUSR2 : SIGUSR1;
}

namespace detail {

namespace {
std::string env_or_empty(const char* k) {
  const char* v = std::getenv(k);
  return v ? v : "";
}

/// Highest N of hpc_ckpt_N.ckpt in `dir` (0 if none).
int64_t max_hpc_index(const std::string& dir) {
  static const std::regex kName(R"(hpc_ckpt_(\d{1,9})\.ckpt)");
  int64_t best = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::smatch m;
    const std::string name = it->path().filename().string();
    if (std::regex_match(name, m, kName)) best = std::max<int64_t>(best, std::stoll(m[1].str()));
  }
  return best;
}

}  // namespace

std::string hpc_checkpoint_path(const std::string& dir, int64_t n) {
  return (std::filesystem::path(dir) / ("hpc_ckpt_" + std::to_string(n) + ".ckpt")).string();
}

std::string slurm_batch_job_id() {
  const std::string job = env_or_empty("SLURM_JOB_ID");
  const std::string name = env_or_empty("SLURM_JOB_NAME");
  if (job.empty() || name == "bash" || name == "interactive") return "";  // as Lightning's detect()
  const std::string array_job = env_or_empty("SLURM_ARRAY_JOB_ID");
  if (!array_job.empty()) return array_job + "_" + env_or_empty("SLURM_ARRAY_TASK_ID");
  return job;
}

std::string hpc_resume_path(const std::string& dir) {
  const int64_t n = max_hpc_index(dir);
  return n > 0 ? hpc_checkpoint_path(dir, n) : "";
}

int64_t next_hpc_index(const std::string& dir) { return max_hpc_index(dir) + 1; }

void slurm_requeue(const std::string& job) {
  std::vector<std::string> args{"scontrol", "requeue", job};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int err = ::posix_spawnp(&pid, "scontrol", nullptr, nullptr, argv.data(), environ);
  VOLT_CHECK(err == 0, TrainingError, "cannot run 'scontrol requeue ", job, "': ", std::strerror(err),
             " (is scontrol on PATH?)");
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  VOLT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, TrainingError, "'scontrol requeue ", job, "' failed (",
             WIFEXITED(status) ? "exit code " + std::to_string(WEXITSTATUS(status)) : std::string("killed by a signal"),
             ")");
}

}  // namespace detail
}  // namespace volt
