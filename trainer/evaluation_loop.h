#pragma once
/// EvaluationLoop: one validation or test epoch (Lightning's _EvaluationLoop), also run as fit's
/// sanity check and at fit's val-check points, over one loader or several (the steps then get the
/// loader's dataloader_idx and every logged name Lightning's "/dataloader_idx_<i>" suffix). The
/// module runs in eval mode without gradients and is put back in its previous mode afterwards; the
/// epoch means are logged at fit's progress (never those of the sanity check).
///
/// Ownership: borrows the Strategy, the hook dispatcher, the metrics, the data connector and the
/// Trainer's stage, which it sets for the epoch and restores after. Thread-safety: the training
/// thread only.
#include <cstdint>
#include <functional>
#include <vector>

#include "volt/module/data.h"
#include "volt/module/lightning_module.h"
#include "volt/strategies/strategy.h"
#include "volt/trainer/data_connector.h"
#include "volt/trainer/hook_dispatcher.h"
#include "volt/trainer/metrics.h"
#include "volt/trainer/trainer_state.h"

namespace volt {

class EvaluationLoop {
 public:
  /// How many batches of a loader to run (its limit_*_batches, or the sanity check's count).
  using BatchCount = std::function<int64_t(const DataLoader&)>;

  EvaluationLoop(Strategy& strategy, HookDispatcher& hooks, Metrics& metrics, DataConnector& data, RunningStage& stage)
      : strategy_(strategy), hooks_(hooks), metrics_(metrics), data_(data), stage_(stage) {}

  /// Runs `count(loader)` batches of each loader as `stage` (Sanity, Validate or Test): one epoch
  /// (one set of epoch hooks and one metrics row) over all of them. Throws ConfigError when the
  /// module lacks the step the stage needs. `*pending` (when given) is set false once the epoch's
  /// metrics are final, before on_validation_end / on_test_end.
  void run(LightningModule& module, const std::vector<DataLoader*>& loaders, RunningStage stage,
           const BatchCount& count, const FitProgress& progress, bool* pending = nullptr);
  /// Run the epochs under InferenceMode (true) or NoGradGuard (false); see [Note: inference mode].
  void set_inference_mode(bool on) { inference_mode_ = on; }
  bool inference_mode() const { return inference_mode_; }

 private:
  void run_loader(LightningModule& module, DataLoader& loader, int64_t dataloader_idx, bool is_val,
                  int64_t max_batches);

  Strategy& strategy_;
  HookDispatcher& hooks_;
  Metrics& metrics_;
  DataConnector& data_;
  RunningStage& stage_;
  bool inference_mode_ = false;
};

}  // namespace volt
