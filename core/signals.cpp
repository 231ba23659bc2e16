#include "volt/core/signals.h"

#include <unistd.h>

#include <cerrno>
#include <csignal>

namespace volt::detail {

namespace {
volatile std::sig_atomic_t g_stop_signal = 0;  // see [Note: the one global]
int g_depth = 0;                               // guards alive (training thread only)

extern "C" void on_stop_signal(int sig) {
  g_stop_signal = sig;
  // write(2) is async-signal-safe; spdlog is not. Said once: the handler resets itself.
  static const char kInt[] = "volt: SIGINT received: stopping cleanly (send it again to end the process now)\n";
  static const char kTerm[] = "volt: SIGTERM received: stopping cleanly (send it again to end the process now)\n";
  // Any other handled signal is a SLURM requeue signal (Trainer's SLURMOptions::requeue_signal).
  static const char kUsr1[] = "volt: SIGUSR1 received: saving hpc_ckpt and requeueing the SLURM job\n";
  static const char kUsr2[] = "volt: SIGUSR2 received: saving hpc_ckpt and requeueing the SLURM job\n";
  static const char kOther[] = "volt: stop signal received: stopping cleanly (send it again to end the process now)\n";
  const char* m = sig == SIGINT    ? kInt
                  : sig == SIGTERM ? kTerm
                  : sig == SIGUSR1 ? kUsr1
                  : sig == SIGUSR2 ? kUsr2
                                   : kOther;
  const size_t n = sig == SIGINT    ? sizeof kInt - 1
                   : sig == SIGTERM ? sizeof kTerm - 1
                   : sig == SIGUSR1 ? sizeof kUsr1 - 1
                   : sig == SIGUSR2 ? sizeof kUsr2 - 1
                                    : sizeof kOther - 1;
  const int saved = errno;
  [[maybe_unused]] const ssize_t w = ::write(STDERR_FILENO, m, n);
  errno = saved;
}
}  // namespace

StopSignals::StopSignals(int extra) {
  if (g_depth++ > 0) return;
  outermost_ = true;
  extra_ = extra;
  g_stop_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;  // a second signal takes the default action: the process ends
  sigaction(SIGINT, &sa, &old_int_);
  sigaction(SIGTERM, &sa, &old_term_);
  if (extra_) sigaction(extra_, &sa, &old_extra_);
}

StopSignals::~StopSignals() {
  --g_depth;
  if (!outermost_) return;
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
  if (extra_) sigaction(extra_, &old_extra_, nullptr);
}

int StopSignals::requested() { return static_cast<int>(g_stop_signal); }

bool StopSignals::active() { return g_depth > 0; }

}  // namespace volt::detail
