#include "volt/core/signals.h"

namespace volt::detail {

namespace {
volatile std::sig_atomic_t g_stop_signal = 0;  // see [Note: the one global]
int g_depth = 0;                               // guards alive (training thread only)

extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }
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
