#include "volt/callbacks/weight_averaging.h"

#include <spdlog/spdlog.h>

#include "volt/trainer/trainer.h"

namespace volt {

void WeightAveragingOptions::validate(const std::string& prefix) const {
  detail::validate_averaging_device(device, prefix + ".device");
}

WeightAveraging::WeightAveraging(WeightAveragingOptions options, AveragingFn avg_fn)
    : options_(std::move(options)),
      avg_fn_(std::move(avg_fn)),
      averaged_(options_.device.value_or(""), /*buffers=*/true, options_.use_buffers) {
  options_.validate(state_key());
  VOLT_CHECK(avg_fn_ != nullptr, ConfigError, "WeightAveraging: the averaging function is empty");
}

bool WeightAveraging::should_update(std::optional<int64_t> step_idx, std::optional<int64_t>) {
  return step_idx.has_value();
}

void WeightAveraging::setup(Trainer&, LightningModule&, const std::string& stage) {
  if (stage != "fit") {
    fitting_ = false;  // a fit that ended in an error did not reach on_fit_end
    return;
  }
  // A new fit starts a new average; a resumed one gets its state back from the checkpoint next.
  fitting_ = true;
  swapped_ = false;
  averaged_.clear();
  latest_update_step_ = 0;
  latest_update_epoch_ = -1;
  pending_epoch_ = -1;
}

void WeightAveraging::on_fit_start(Trainer& t, LightningModule& m) {
  // Before the first update the copy is the model as fit starts (AveragedModel's deep copy).
  if (averaged_.empty()) averaged_.snapshot(t, m);
}

void WeightAveraging::on_fit_end(Trainer& t, LightningModule& m) {
  // [Note: the final average] The epoch that max_steps, should_stop or a Timer cut short counts
  // now, as Lightning's epoch end counts it, and only now: the checkpoints of its end (last.ckpt
  // among them) hold the state without it, so a fit resumed from them finishes that epoch and
  // updates at its real end, as the uninterrupted fit does. The model takes the average after
  // them too, so they keep the trained weights.
  if (pending_epoch_ >= 0) epoch_update(t, m, pending_epoch_);
  pending_epoch_ = -1;
  if (!averaged_.empty()) averaged_.copy_to_model(t, m);
  fitting_ = false;
}

void WeightAveraging::update(Trainer& t, LightningModule& m) { averaged_.update(t, m, avg_fn_); }

void WeightAveraging::on_train_batch_end(Trainer& t, LightningModule& m, const torch::Tensor&, const Batch&, int64_t) {
  // global_step counts optimizer steps: only a batch that stepped (the last of an accumulation)
  // moves it past the last update.
  if (t.global_step() > latest_update_step_ && should_update(t.global_step() - 1, std::nullopt)) {
    update(t, m);
    latest_update_step_ = t.global_step();
  }
}

void WeightAveraging::epoch_update(Trainer& t, LightningModule& m, int64_t epoch) {
  if (epoch > latest_update_epoch_ && should_update(std::nullopt, epoch)) {
    update(t, m);
    latest_update_epoch_ = epoch;
  }
}

void WeightAveraging::on_train_epoch_start(Trainer& t, LightningModule& m) {
  // A fit resumed from a checkpoint written at an epoch's last batch goes on with the next epoch
  // without that epoch's end: its update happens now, on the same weights.
  if (t.current_epoch() > 0) epoch_update(t, m, t.current_epoch() - 1);
}

void WeightAveraging::on_train_epoch_end(Trainer& t, LightningModule& m) {
  if (t.epoch_finished())
    epoch_update(t, m, t.current_epoch());
  else
    pending_epoch_ = t.current_epoch();  // see [Note: the final average]
}

void WeightAveraging::on_train_end(Trainer& t, LightningModule& m) {
  if (t.current_epoch() > 0) epoch_update(t, m, t.current_epoch() - 1);  // as in on_train_epoch_start
}

void WeightAveraging::on_validation_epoch_start(Trainer& t, LightningModule& m) {
  if (!fitting_ || averaged_.empty() || swapped_) return;
  averaged_.swap(t, m);
  swapped_ = true;
}

void WeightAveraging::on_validation_epoch_end(Trainer& t, LightningModule& m) {
  if (!swapped_) return;
  averaged_.swap(t, m);
  swapped_ = false;
}

void WeightAveraging::on_exception(Trainer& t, LightningModule& m, const std::exception&) {
  // Still fitting: an OnExceptionCheckpoint (which runs after this, with the checkpoint callbacks)
  // saves the average beside the trained weights, so that its checkpoint resumes as the others.
  pending_epoch_ = -1;
  // An error during validation: the model gets its trained weights back (a local copy, no collective).
  if (!swapped_) return;
  swapped_ = false;
  try {
    averaged_.swap(t, m);
  } catch (const std::exception& e) {
    spdlog::error("{}: the trained weights could not be restored after the error: {}", state_key(), e.what());
  }
}

void WeightAveraging::on_save_checkpoint(Trainer&, LightningModule&, CheckpointMeta& meta) {
  if (fitting_ && !averaged_.empty()) averaged_.save(state_key(), meta.tensors);
}

void WeightAveraging::on_load_checkpoint(Trainer& t, LightningModule& m, const CheckpointMeta& meta) {
  if (!fitting_) return;  // validate / test / predict from a checkpoint: the module's weights only
  if (averaged_.load(t, m, state_key(), meta.tensors)) return;
  if (averaged_.n_averaged() > 0 && t.is_global_zero())
    spdlog::warn(
        "{}: the checkpoint holds no averaged weights for this run's layout (written by another number of "
        "ranks, strategy or model, or without this callback): the average starts again from the current weights",
        state_key());
  averaged_.set_n_averaged(0);
}

YAML::Node WeightAveraging::state_dict() const {
  YAML::Node n(YAML::NodeType::Map);
  n["latest_update_step"] = latest_update_step_;
  n["latest_update_epoch"] = latest_update_epoch_;
  n["n_averaged"] = averaged_.n_averaged();
  return n;
}

void WeightAveraging::load_state_dict(const YAML::Node& state) {
  if (state["latest_update_step"]) latest_update_step_ = state["latest_update_step"].as<int64_t>();
  if (state["latest_update_epoch"]) latest_update_epoch_ = state["latest_update_epoch"].as<int64_t>();
  if (state["n_averaged"]) averaged_.set_n_averaged(state["n_averaged"].as<int64_t>());
}

}  // namespace volt
