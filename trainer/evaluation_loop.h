#pragma once
/// EvaluationLoop: one validation or test epoch (Lightning's _EvaluationLoop), also run as fit's
/// sanity check and at fit's val-check points. The module runs in eval mode without gradients and
/// is put back in its previous mode afterwards; the epoch means are logged at fit's progress
/// (never those of the sanity check).
///
/// Ownership: borrows the Strategy, the hook dispatcher, the metrics and the Trainer's stage, which
/// it sets for the epoch and restores after. Thread-safety: the training thread only.
#include <cstdint>

#include "volt/module/data.h"
#include "volt/module/lightning_module.h"
#include "volt/strategies/strategy.h"
#include "volt/trainer/hook_dispatcher.h"
#include "volt/trainer/metrics.h"
#include "volt/trainer/trainer_state.h"

namespace volt {

class EvaluationLoop {
 public:
  EvaluationLoop(Strategy& strategy, HookDispatcher& hooks, Metrics& metrics, RunningStage& stage)
      : strategy_(strategy), hooks_(hooks), metrics_(metrics), stage_(stage) {}

  /// Runs the first `max_batches` batches of `loader` as `stage` (Sanity, Validate or Test).
  /// Throws ConfigError when the module lacks the step the stage needs.
  void run(LightningModule& module, DataLoader& loader, RunningStage stage, int64_t max_batches,
           const FitProgress& progress);

 private:
  Strategy& strategy_;
  HookDispatcher& hooks_;
  Metrics& metrics_;
  RunningStage& stage_;
};

}  // namespace volt
