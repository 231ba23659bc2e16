#pragma once
/// PredictLoop: Trainer::predict's epoch (Lightning's _PredictionLoop) over one loader or several:
/// predict_step on every batch in eval mode without gradients, the on_predict_* hooks (a
/// PredictionWriter callback writes from them), and this rank's outputs in batch order.
///
/// [Note: every sample once] Predict hands loaders to the strategy unpadded, so each sample is
/// predicted once over all ranks, and the ranks' batch counts may differ by one (an iterable
/// dataset's shards by more). Under several ranks the loop agrees on each batch (one all-reduce of
/// a flag) and runs while any rank has one; a rank that ran out repeats its last batch and drops
/// the output, so a strategy whose forward is collective (FSDP's all-gathers) never waits alone.
///
/// Ownership: borrows the Strategy, hook dispatcher, data connector and the Trainer's stage.
/// Thread-safety: the training thread only.
#include <cstdint>
#include <functional>
#include <vector>

#include "volt/module/data.h"
#include "volt/module/lightning_module.h"
#include "volt/strategies/strategy.h"
#include "volt/trainer/hook_dispatcher.h"
#include "volt/trainer/trainer_state.h"

namespace volt {

class PredictLoop {
 public:
  using BatchCount = std::function<int64_t(const DataLoader&)>;

  PredictLoop(Strategy& strategy, HookDispatcher& hooks, RunningStage& stage)
      : strategy_(strategy), hooks_(hooks), stage_(stage) {}

  /// Predicts `count(loader)` batches of each loader; returns this rank's outputs (empty unless
  /// `keep_outputs`) loader by loader. Throws ConfigError if the module lacks predict_step.
  std::vector<Batch> run(LightningModule& module, const std::vector<DataLoader*>& loaders, const BatchCount& count,
                         bool keep_outputs);
  /// InferenceMode (true) or NoGradGuard (false), as EvaluationLoop::set_inference_mode.
  void set_inference_mode(bool on) { inference_mode_ = on; }

 private:
  void run_loader(LightningModule& module, DataLoader& loader, int64_t dataloader_idx, int64_t max_batches,
                  std::vector<Batch>* outputs);

  Strategy& strategy_;
  HookDispatcher& hooks_;
  RunningStage& stage_;
  bool inference_mode_ = false;
};

}  // namespace volt
