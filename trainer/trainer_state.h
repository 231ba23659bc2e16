#pragma once
/// What the Trainer's parts share while a call runs (Lightning's TrainerState): which loop is
/// running, and how far fit has come. The Trainer owns the stage; the FitLoop owns the progress.
/// Thread-safety: the training thread only.
#include <cstdint>

namespace volt {

/// Lightning's RunningStage (Sanity: the validation steps run before training starts).
enum class RunningStage { None, Sanity, Train, Validate, Test, Predict };

/// Fit's position: the FitLoop advances it, checkpoints save it (meta["loops"]), and metric rows
/// are stamped with it.
struct FitProgress {
  int64_t epoch = 0;
  int64_t global_step = 0;     // optimizer steps taken
  int64_t batch_in_epoch = 0;  // batches finished in the current epoch (for mid-epoch resume)
  bool epoch_done = false;     // the current epoch's batches ran out (its length known only then)
};

}  // namespace volt
