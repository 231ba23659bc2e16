#pragma once
/// WeightAveraging: keeps an averaged copy of the model's weights, updated after optimizer steps
/// and/or training epochs, as Lightning 2.5's WeightAveraging (torch's AveragedModel): validation
/// runs on the averaged weights (swapped in at on_validation_epoch_start and back at
/// on_validation_epoch_end), and when fit ends (on_fit_end, after the checkpoints of its end, so
/// that those keep the trained weights; Lightning copies in on_train_end) they are copied into
/// the model.
///
/// When it updates is should_update()'s decision (override it; the default: after every optimizer
/// step); how is the averaging function's (the default: the equally weighted running mean; see
/// EMAWeightAveraging for an exponential moving average). The first update copies the weights.
///
/// What it averages is what this rank holds (detail::AveragedWeights): under FSDP each unit's flat
/// shard, so the copy is 1/world of the model and nothing is gathered. The copy starts as the
/// model's weights when fit starts, so a validation before the first update sees those, as in
/// Lightning. Its state (the update counters, the number of models averaged and, as this rank's
/// CheckpointMeta::tensors, the copy) is checkpointed, so a resumed fit ends with the same weights
/// as an uninterrupted one. Unlike Lightning, the checkpoint's model weights stay the trained ones
/// (the averaged copy is kept beside them), so a checkpoint resumes training as written.
///
/// Ownership: owns the averaged copy (kept after fit, for inspection). Thread-safety: hooks run on
/// the training thread.
#include <optional>
#include <string>

#include "volt/callbacks/averaged_weights.h"
#include "volt/callbacks/callback.h"
#include "volt/core/errors.h"

namespace volt {

/// The options every weight-averaging callback shares (Lightning's WeightAveraging arguments).
struct WeightAveragingOptions {
  /// Where the averaged copy lives: null (the default) beside the weights, or a device ("cpu").
  std::optional<std::string> device;
  /// Average the buffers too (floating ones; integer buffers are copied). false: buffers are copied
  /// at each update.
  bool use_buffers = true;

  template <class V>
  void visit(V& v) {
    v("device", device)("use_buffers", use_buffers);
  }
  void validate(const std::string& prefix = "WeightAveraging") const;
};

class WeightAveraging : public Callback {
 public:
  using Options = WeightAveragingOptions;
  explicit WeightAveraging(WeightAveragingOptions options = {}, AveragingFn avg_fn = running_mean);
  std::string state_key() const override { return "WeightAveraging"; }

  /// Whether to update after optimizer step `step_idx` (0-based; called after every step) or after
  /// epoch `epoch_idx` (0-based; called after every training epoch); exactly one is given. Default:
  /// true for every step.
  virtual bool should_update(std::optional<int64_t> step_idx, std::optional<int64_t> epoch_idx);

  void setup(Trainer&, LightningModule&, const std::string& stage) override;
  void on_fit_start(Trainer&, LightningModule&) override;
  void on_fit_end(Trainer&, LightningModule&) override;
  void on_train_batch_end(Trainer&, LightningModule&, const torch::Tensor& loss, const Batch&,
                          int64_t batch_idx) override;
  void on_train_epoch_start(Trainer&, LightningModule&) override;
  void on_train_epoch_end(Trainer&, LightningModule&) override;
  void on_train_end(Trainer&, LightningModule&) override;
  void on_validation_epoch_start(Trainer&, LightningModule&) override;
  void on_validation_epoch_end(Trainer&, LightningModule&) override;
  void on_save_checkpoint(Trainer&, LightningModule&, CheckpointMeta&) override;
  void on_load_checkpoint(Trainer&, LightningModule&, const CheckpointMeta&) override;
  void on_exception(Trainer&, LightningModule&, const std::exception&) override;
  YAML::Node state_dict() const override;
  void load_state_dict(const YAML::Node& state) override;

  /// Models averaged so far.
  int64_t n_averaged() const { return averaged_.n_averaged(); }
  /// Elements of the averaged copy on this rank (under FSDP: the shards', about 1/world).
  int64_t averaged_numel() const { return averaged_.numel(); }

 private:
  void update(Trainer& t, LightningModule& m);
  /// The update after epoch `epoch`, unless done or should_update() declines it.
  void epoch_update(Trainer& t, LightningModule& m, int64_t epoch);

  WeightAveragingOptions options_;
  AveragingFn avg_fn_;
  detail::AveragedWeights averaged_;
  int64_t latest_update_step_ = 0;    // the global step of the last update after a step
  int64_t latest_update_epoch_ = -1;  // the epoch of the last update after an epoch
  int64_t pending_epoch_ = -1;        // an epoch cut short, whose update waits for on_fit_end
  bool fitting_ = false;              // between setup("fit") and the end of fit
  bool swapped_ = false;              // the model holds the averaged weights (validation)
};

}  // namespace volt
