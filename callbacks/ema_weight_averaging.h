#pragma once
/// EMAWeightAveraging: an exponential moving average of the weights, as Lightning 2.5's
/// EMAWeightAveraging: after optimizer step `step_idx` (0-based) it updates when
/// `step_idx >= update_starting_at_step` (when set) and `step_idx % update_every_n_steps == 0`
/// (0 turns step updates off), and after epoch `epoch_idx` when `update_starting_at_epoch` is set
/// and `epoch_idx >= update_starting_at_epoch`. An update is
/// `averaged = decay * averaged + (1 - decay) * current` (torch's get_ema_avg_fn), the first one a
/// copy. Everything else (validation on the averaged weights, the averaged weights in the model at
/// the end of fit, the checkpointed state, FSDP shards) is WeightAveraging's.
#include <optional>
#include <string>

#include "volt/callbacks/weight_averaging.h"

namespace volt {

struct EMAWeightAveragingOptions {
  std::optional<std::string> device;  // null: beside the weights
  bool use_buffers = true;
  double decay = 0.999;
  int64_t update_every_n_steps = 1;
  std::optional<int64_t> update_starting_at_step;
  std::optional<int64_t> update_starting_at_epoch;

  template <class V>
  void visit(V& v) {
    v("device", device)("use_buffers", use_buffers)("decay", decay)("update_every_n_steps", update_every_n_steps)(
        "update_starting_at_step", update_starting_at_step)("update_starting_at_epoch", update_starting_at_epoch);
  }
  void validate(const std::string& prefix = "EMAWeightAveraging") const;
};

class EMAWeightAveraging : public WeightAveraging {
 public:
  using Options = EMAWeightAveragingOptions;
  explicit EMAWeightAveraging(EMAWeightAveragingOptions options = {});
  std::string state_key() const override { return "EMAWeightAveraging"; }
  bool should_update(std::optional<int64_t> step_idx, std::optional<int64_t> epoch_idx) override;
  const EMAWeightAveragingOptions& options() const { return options_; }

 private:
  EMAWeightAveragingOptions options_;
};

}  // namespace volt
