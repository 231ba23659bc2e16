#pragma once
/// StopSignals: while alive, SIGINT and SIGTERM do not kill the process at once but ask the training
/// loop to stop (as Lightning's signal connector): the fit loop polls requested() at every step,
/// all ranks agree through the step's collective, and fit ends with an error naming the signal and
/// the step, every process exiting non-zero with nothing half-written. A second signal of the same
/// kind kills at once (the handler is installed with SA_RESETHAND), so a stuck process still dies.
///
/// [Note: the one global] A signal handler can only reach a variable of static storage; the flag it
/// sets is the process's single piece of global mutable state, written only by the handler and read
/// through requested(). Guards nest: the previous handlers come back when the outermost ends.
/// Thread-safety: construct and destroy on one thread; requested() is async-signal-safe.
#include <csignal>

namespace volt::detail {

class StopSignals {
 public:
  /// `extra` (0 = none): one more signal to catch the same way (SLURM's requeue signal).
  explicit StopSignals(int extra = 0);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  /// The signal received since the guard was made (0 if none).
  static int requested();
  /// Whether a guard is alive (fit is running): loops outside the fit loop (validation, the sanity
  /// check) poll requested() only then.
  static bool active();

 private:
  struct sigaction old_int_ {
  }, old_term_{}, old_extra_{};
  int extra_ = 0;
  bool outermost_ = false;
};

}  // namespace volt::detail
