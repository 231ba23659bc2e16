#pragma once
/// SLURM auto-requeue, as Lightning's SLURMEnvironment(auto_requeue=True): in a SLURM batch job
/// (`#SBATCH --signal=USR1@90` asks SLURM for SIGUSR1 90 s before the time limit), the requeue
/// signal makes every rank finish its step, save `hpc_ckpt_<N>.ckpt` in default_root_dir, and rank 0
/// run `scontrol requeue <job>`; fit then ends with a TrainingError saying so. When the requeued job
/// starts again, fit without a ckpt_path resumes from the newest hpc checkpoint there.
///
/// YAML (trainer section): `slurm: {auto_requeue: true, requeue_signal: SIGUSR1}`. Outside a SLURM
/// batch job (no SLURM_JOB_ID, or an interactive job named bash/interactive) nothing changes: the
/// signal keeps its default action.
#include <string>
#include <vector>

#include "volt/core/choice.h"
#include "volt/core/options.h"

namespace volt {

enum class RequeueSignal { Usr1, Usr2 };
template <>
struct ChoiceNames<RequeueSignal> {
  static const std::vector<std::pair<RequeueSignal, const char*>>& names() {
    static const std::vector<std::pair<RequeueSignal, const char*>> n = {{RequeueSignal::Usr1, "SIGUSR1"},
                                                                         {RequeueSignal::Usr2, "SIGUSR2"}};
    return n;
  }
  static std::string normalize(const std::string& s) {
    const std::string u = detail::to_upper(s);
    return u.rfind("SIG", 0) == 0 ? u : "SIG" + u;
  }
};

struct SLURMOptions {
  bool auto_requeue = true;
  Choice<RequeueSignal> requeue_signal = RequeueSignal::Usr1;

  template <class V>
  void visit(V& v) {
    v("auto_requeue", auto_requeue)("requeue_signal", requeue_signal);
  }
  /// The signal number to handle in this process: 0 unless auto_requeue and a SLURM batch job.
  int active_signal() const;
};

namespace detail {
/// The job `scontrol requeue` takes: "<SLURM_ARRAY_JOB_ID>_<SLURM_ARRAY_TASK_ID>" for an array task,
/// else SLURM_JOB_ID; "" outside a SLURM batch job.
std::string slurm_batch_job_id();
/// `<dir>/hpc_ckpt_<N>.ckpt` with the highest N there ("" if none).
std::string hpc_resume_path(const std::string& dir);
/// The N of the next one to write: one above the highest there (1 in an empty folder).
int64_t next_hpc_index(const std::string& dir);
/// `<dir>/hpc_ckpt_<n>.ckpt`.
std::string hpc_checkpoint_path(const std::string& dir, int64_t n);
/// Runs `scontrol requeue <job>` (scontrol from PATH); throws TrainingError naming the exit status.
void slurm_requeue(const std::string& job);
}  // namespace detail

}  // namespace volt
