// FitLoop: epochs, batches, accumulation, val checks, optimizer and scheduler steps, resume progress.
#include "volt/trainer/fit_loop.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <csignal>
#include <map>

#include "volt/checkpoint/rng_state.h"
#include "volt/core/errors.h"
#include "volt/core/signals.h"

namespace volt {

void FitLoop::setup_data(DataLoader& train_loader, const std::string& resumed_from) {
  num_training_batches_ = count_batches(options_.limit_train_batches, train_loader, "trainer.limit_train_batches");
  VOLT_CHECK(num_training_batches_ > 0, ConfigError, "the training dataloader yields no batches on rank ",
             strategy_.global_rank(), " (", train_loader.num_batches(), " batches of batch_size ",
             train_loader.options().batch_size, ", limit_train_batches)");
  data_shape_.batch_size = train_loader.options().batch_size;
  data_shape_.world_size = strategy_.world_size();
  data_shape_.samples = train_loader.is_iterable() ? -1 : train_loader.dataset().size();
  data_shape_.shuffle = train_loader.options().shuffle;
  data_shape_.seed = train_loader.options().seed;
  if (!saved_) return;
  const DataShape saved = *saved_;
  saved_.reset();  // checked once, against the loader of the fit that restored it
  check_resume_position(saved, resumed_from);
}

void FitLoop::check_resume_position(const DataShape& saved, const std::string& resumed_from) const {
  if (progress_.epoch_done || progress_.batch_in_epoch == 0) return;  // at an epoch's boundary: nothing to map
  const std::string where = detail::str_cat("checkpoint '", resumed_from, "' was saved in the middle of epoch ",
                                            progress_.epoch, " (after ", progress_.batch_in_epoch, " batches)");
  const std::string what_to_do =
      "; resuming would skip other samples than those trained on. Resume with the same data and batch size, from a "
      "checkpoint saved at an epoch's end, or start from the weights alone (volt::load_weights)";
  // The global batch is what the position counts in: the same one on another world size (resharding)
  // covers the same samples of the sampler's order.
  VOLT_CHECK(saved.batch_size < 0 || saved.global_batch() == data_shape_.global_batch(), CheckpointError, where,
             " with batch_size ", saved.batch_size, " on ", saved.world_size, " rank(s) (a global batch of ",
             saved.global_batch(), "); this run's training loader has batch_size ", data_shape_.batch_size, " on ",
             data_shape_.world_size, " rank(s) (a global batch of ", data_shape_.global_batch(), ")", what_to_do);
  VOLT_CHECK(saved.samples < 0 || data_shape_.samples < 0 || saved.samples == data_shape_.samples, CheckpointError,
             where, " with ", saved.samples, " training samples; this run's training data has ", data_shape_.samples,
             " (another block_size, data file or split?)", what_to_do);
  auto order = [](const DataShape& d) {
    return *d.shuffle ? "shuffle on (seed " + std::to_string(d.seed) + ")" : std::string("shuffle off");
  };
  VOLT_CHECK(
      !saved.shuffle || (*saved.shuffle == *data_shape_.shuffle && (!*saved.shuffle || saved.seed == data_shape_.seed)),
      CheckpointError, where, " with ", order(saved), "; this run's training loader has ", order(data_shape_),
      ", another order of the samples", what_to_do);
  if (saved.accumulated > 0 && strategy_.is_global_zero())
    spdlog::warn(
        "{}, inside a gradient accumulation window: the gradients of its {} micro-batch(es) since the last optimizer "
        "step are not in checkpoints, so this fit's next step goes without them and the run differs from an "
        "uninterrupted one from there. Checkpoints written at optimizer steps resume exactly (validation every "
        "val_check_interval batches writes them at steps when it is a multiple of accumulate_grad_batches)",
        where, saved.accumulated);
}

bool FitLoop::min_reached() const {
  const int64_t epochs_done = progress_.epoch + (progress_.epoch_done ? 1 : 0);
  return (!options_.min_epochs || epochs_done >= *options_.min_epochs) &&
         (!options_.min_steps || progress_.global_step >= *options_.min_steps);
}

bool FitLoop::done() const {
  if (options_.max_steps >= 0 && progress_.global_step >= options_.max_steps) return true;
  // should_stop (a Timer, max_time, EarlyStopping) waits for the accumulation window's step:
  // see [Note: whole accumulation windows].
  return should_stop_ && min_reached() && !window_open_;
}

namespace {
/// Lightning's message, once per fit, when should_stop is held back by min_epochs / min_steps.
void note_held_stop(bool held, bool& warned, const TrainerOptions& o, bool global_zero) {
  if (!held || warned) return;
  warned = true;
  if (!global_zero) return;
  spdlog::info(
      "Trainer was signaled to stop but the required `min_epochs={}` or `min_steps={}` has not been met. Training "
      "will continue...",
      o.min_epochs ? std::to_string(*o.min_epochs) : "None", o.min_steps ? std::to_string(*o.min_steps) : "None");
}
}  // namespace

void FitLoop::maybe_reload(DataLoader*& train_loader, std::vector<DataLoader*>& val_loaders) {
  const int64_t n = options_.reload_dataloaders_every_n_epochs;
  if (n <= 0 || !reload_ || progress_.epoch - loaded_epoch_ < n) return;
  Loaders l = reload_();
  train_loader = l.train;
  val_loaders = std::move(l.val);
  loaded_epoch_ = progress_.epoch;
  num_training_batches_ = count_batches(options_.limit_train_batches, *train_loader, "trainer.limit_train_batches");
  VOLT_CHECK(num_training_batches_ > 0, ConfigError, "epoch ", progress_.epoch,
             ": the reloaded training dataloader yields no batches on rank ", strategy_.global_rank());
  enable_validation_ = any_validation_batches(val_loaders);
}

void FitLoop::run(LightningModule& module, DataLoader& first_train_loader,
                  const std::vector<DataLoader*>& first_val_loaders) {
  module_ = &module;
  min_warned_ = false;
  stop_deferred_ = window_open_ = validation_pending_ = scheduler_step_pending_ = false;
  DataLoader* train_loader = &first_train_loader;
  std::vector<DataLoader*> val_loaders = first_val_loaders;
  loaded_epoch_ = progress_.epoch;
  stage_ = RunningStage::Train;
  // Under manual optimization each LightningOptimizer::step() is a global step, as in Lightning.
  optimization_.set_step_counter([this] { ++progress_.global_step; });
  enable_validation_ = any_validation_batches(val_loaders);
  hooks_.on_train_start(module);
  resume_pending(module, val_loaders);
  // A checkpoint saved at the end of an epoch resumes at the next one.
  if (progress_.epoch_done || progress_.batch_in_epoch >= num_training_batches_) next_epoch();
  const int64_t max_epochs = options_.effective_max_epochs();
  while (progress_.epoch < max_epochs && !done()) {
    if (progress_.batch_in_epoch == 0) maybe_reload(train_loader, val_loaders);
    run_epoch(*train_loader, val_loaders, progress_.batch_in_epoch);
    note_held_stop(should_stop_ && !min_reached(), min_warned_, options_, strategy_.is_global_zero());
    if (!progress_.epoch_done) break;  // stopped mid-epoch (max_steps / should_stop)
    if (done()) break;
    next_epoch();
  }
  stage_ = RunningStage::Train;
  hooks_.on_train_end(module);
}

void FitLoop::optimizer_step_and_schedule(int64_t batch_idx) {
  const bool stepped = optimization_.automatic_step(*module_, progress_.global_step + 1, progress_.epoch, batch_idx);
  if (!stepped) spdlog::debug("step {}: inf/nan gradients, optimizer step skipped", progress_.global_step);
  ++progress_.global_step;
}

void FitLoop::next_epoch() {
  ++progress_.epoch;
  progress_.batch_in_epoch = 0;
  progress_.epoch_done = false;
}

void FitLoop::run_epoch(DataLoader& train_loader, const std::vector<DataLoader*>& val_loaders, int64_t start_batch) {
  LightningModule& module = *module_;
  auto epoch_scope = profile(strategy_.profiler(), "run_training_epoch");
  // overfit_batches: the same batches in the same order every epoch.
  train_loader.set_epoch(options_.overfitting() ? 0 : progress_.epoch);
  const int64_t n = num_training_batches_;
  const bool unknown_length = n == DataLoader::kUnknownLength;
  int64_t val_every = 0;
  if (!val_loaders.empty() && (progress_.epoch + 1) % options_.check_val_every_n_epoch == 0) {
    VOLT_CHECK(!unknown_length || !options_.val_check_interval.is_fraction || options_.val_check_interval.value == 1.0,
               ConfigError, "config key 'trainer.val_check_interval': a fraction of an epoch of unknown length (an ",
               "iterable dataset without a length) is undefined; give a number of batches");
    val_every = !options_.val_check_interval.is_fraction ? static_cast<int64_t>(options_.val_check_interval.value)
                : unknown_length                         ? 0  // at the end of the epoch, below
                                 : std::max<int64_t>(1, static_cast<int64_t>(options_.val_check_interval.value * n));
  }
  const bool val_at_end = !val_loaders.empty() && unknown_length && options_.val_check_interval.is_fraction &&
                          (progress_.epoch + 1) % options_.check_val_every_n_epoch == 0;
  const bool automatic = module.automatic_optimization;
  auto callback_metrics = [this]() -> const std::map<std::string, double>& { return metrics_.callback_metrics(); };
  module.train();
  metrics_.reset_epoch(Metrics::Loop::Train);
  hooks_.on_train_epoch_start(module);
  // Read once per epoch, after on_train_epoch_start: a callback (GradientAccumulationScheduler) may
  // change it there.
  const int64_t accum = accumulate_;
  VOLT_CHECK(accum >= 1, ConfigError, "epoch ", progress_.epoch, ": trainer.accumulate_grad_batches is ", accum,
             "; it must be >= 1");
  BatchStream stream = train_loader.iterate(start_batch);
  // With an unknown length, the batch after this one is fetched first: whether this one is the
  // epoch's last decides the accumulation boundary and the epoch-interval scheduler step.
  std::optional<Batch> ahead = start_batch < n ? data_.next_batch(stream, train_loader) : std::nullopt;
  if (!ahead) progress_.epoch_done = true;
  for (int64_t i = start_batch; i < n && ahead && !done(); ++i) {
    Batch b = strategy_.batch_to_device(module, *ahead, 0);
    ahead = i + 1 < n ? data_.next_batch(stream, train_loader) : std::nullopt;
    const bool last = !ahead;
    metrics_.set_batch(b);  // the batch size that weighs epoch means (Lightning's on_batch_start)
    if (hooks_.on_train_batch_start(module, b, i) == -1) {
      // Lightning: -1 skips the rest of the epoch. A window left open has no step to go with its
      // gradients: they are dropped, so the next epoch starts clean.
      if (automatic && i % accum != 0)
        for (auto& c : optimization_.optimizers().configs) strategy_.zero_grad(*c.optimizer);
      progress_.batch_in_epoch = i;
      progress_.epoch_done = true;
      optimization_.epoch_end_schedulers(progress_.epoch);
      break;
    }
    const bool last_micro = ((i + 1) % accum == 0) || last;
    auto batch_scope = profile(strategy_.profiler(), "run_training_batch");
    // [Note: a stop at check_step] The stop comes after this batch's forward, with batch i not done:
    // the generators go back to where they were before it, so that a checkpoint of the stop
    // (OnExceptionCheckpoint) resumes at batch i with the same dropout masks.
    const std::map<std::string, torch::Tensor> rng_before =
        automatic ? capture_rng_states(strategy_.root_device()) : std::map<std::string, torch::Tensor>{};
    torch::Tensor loss = strategy_.training_step(module, b, i);
    if (automatic) {
      VOLT_CHECK(loss.defined() && loss.numel() == 1, ConfigError, "training_step must return a scalar loss");
      try {
        check_step(loss, i, /*window_open=*/i % accum != 0);
      } catch (const TrainingError&) {
        restore_rng_states(rng_before, strategy_.root_device());
        throw;
      }
      torch::Tensor scaled = accum > 1 ? loss / static_cast<double>(accum) : loss;
      hooks_.on_before_backward(module, scaled);
      strategy_.backward(module, scaled, last_micro);
      hooks_.on_after_backward(module);
      if (last_micro) optimizer_step_and_schedule(i);
    } else {
      // Manual optimization: training_step stepped its optimizers (and counted the global steps).
      VOLT_CHECK(!loss.defined() || loss.numel() == 1, ConfigError,
                 "training_step must return a scalar loss or an undefined tensor, got shape ", loss.sizes());
      // training_step took its optimizer steps: batch i is done, whatever check_step decides.
      progress_.batch_in_epoch = i + 1;
      check_step(loss, i, /*window_open=*/false);
    }
    batch_scope.end();
    // Epoch-interval schedulers step right after the epoch's last optimizer step, as Lightning 2.x
    // does, so checkpoints written by epoch-end hooks already hold the stepped scheduler.
    if (last) optimization_.epoch_end_schedulers(progress_.epoch);
    progress_.batch_in_epoch = i + 1;
    if (last) progress_.epoch_done = true;
    window_open_ = automatic && !last_micro;
    const bool validate_now = (val_every > 0 && (i + 1) % val_every == 0) || (val_at_end && last);
    validation_pending_ = validate_now && enable_validation_;  // until its metrics are final
    scheduler_step_pending_ = last_micro;
    const bool log_now = automatic ? last_micro && progress_.global_step % options_.log_every_n_steps == 0
                                   : (i + 1) % options_.log_every_n_steps == 0;
    if (log_now) metrics_.flush_step_metrics(progress_);
    const torch::Tensor loss_d = loss.defined() ? loss.detach() : loss;
    hooks_.on_train_batch_end(module, loss_d, b, i);
    note_held_stop(should_stop_ && !min_reached(), min_warned_, options_, strategy_.is_global_zero());
    if (validate_now) run_validation(module, val_loaders);  // clears validation_pending_
    // ReduceLROnPlateau with interval "step": after the step's validation, as Lightning.
    if (last_micro) optimization_.plateau_schedulers(SchedulerInterval::Step, progress_.global_step, callback_metrics);
    scheduler_step_pending_ = false;
    if (requeue_pending_ && !window_open_) {  // [Note: whole accumulation windows]
      requeue_pending_ = false;
      throw TrainingError(save_and_requeue_());
    }
  }
  // Also when max_steps or should_stop ended the epoch early: Lightning's fit loop still runs
  // on_train_epoch_end and logs the epoch-level training metrics of the batches that ran.
  end_epoch();
}

namespace {
std::string signal_name(int64_t sig) {
  return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "signal " + std::to_string(sig);
}
}  // namespace

FitLoop::StepVerdict FitLoop::agree(bool finite) {
  // Every rank stops together (one rank's nan or signal alone would leave the others in the next
  // collective). One all-reduce (min) carries both: the lowest rank whose loss is not finite (the
  // world size if none), and minus the lowest rank that received a stop signal.
  const int64_t world = strategy_.world_size(), rank = strategy_.global_rank();
  const int signal = detail::StopSignals::requested();
  StepVerdict v{finite ? world : rank, signal ? rank : world, signal};
  if (world > 1) {
    auto t = strategy_.all_reduce(
        torch::tensor({static_cast<double>(v.bad), static_cast<double>(v.signalled), -static_cast<double>(v.signal)},
                      torch::kDouble),
        ReduceOp::Min);
    v.bad = static_cast<int64_t>(t[0].item<double>());
    v.signalled = static_cast<int64_t>(t[1].item<double>());
    v.signal = -static_cast<int64_t>(t[2].item<double>());
  }
  v.any_signal = v.signalled < world;
  v.any_bad = v.bad < world;
  return v;
}

void FitLoop::check_step(const torch::Tensor& loss, int64_t batch_idx, bool window_open) {
  // Under 16-mixed the loss scaler skips steps with inf/nan gradients by design.
  const bool check_loss = strategy_.precision().grad_scaler() == nullptr && loss.defined();
  const bool finite = !check_loss || torch::isfinite(loss.detach()).all().item<bool>();
  const StepVerdict v = agree(finite);
  if (v.any_signal && requeue_signal_ != 0 && v.signal == requeue_signal_) {
    requeue_pending_ = true;  // after this step's update, so the checkpoint holds a whole step
  } else if (v.any_signal && window_open) {
    // [Note: whole accumulation windows] The micro-batches of an open window have gradients that
    // no checkpoint holds: the stop waits for the window's step, and comes at the next batch.
    if (!stop_deferred_ && strategy_.is_global_zero())
      spdlog::info("{} received: stopping after this gradient accumulation window's optimizer step",
                   signal_name(v.signal));
    stop_deferred_ = true;
  } else if (v.any_signal) {
    throw TrainingError(detail::str_cat("stopped by ", signal_name(v.signal), " (received by rank ", v.signalled,
                                        ") at step ", progress_.global_step, " (epoch ", progress_.epoch, ", batch ",
                                        batch_idx,
                                        "); the checkpoints already written are kept: resume with ckpt_path=last"));
  }
  if (!v.any_bad) return;
  throw TrainingError(detail::str_cat(
      "step ", progress_.global_step, " (epoch ", progress_.epoch, ", batch ", batch_idx, "): the training loss is ",
      v.bad == strategy_.global_rank() ? std::to_string(loss.item<double>()) : std::string("not finite"), " on rank ",
      v.bad, ": training diverged and was stopped", module_->automatic_optimization ? " before this step's update" : "",
      "; the checkpoints already written are kept. "
      "Lower the learning rate, clip gradients (trainer.gradient_clip_val), or set trainer.detect_anomaly: true to "
      "find the operation that produced it"));
}

void FitLoop::check_stop_after_fit() {
  const StepVerdict v = agree(/*finite=*/true);
  if (!v.any_signal) return;
  if (requeue_signal_ != 0 && v.signal == requeue_signal_) {
    if (strategy_.is_global_zero())
      spdlog::info("{} after the last step: the run is complete, so the job is not requeued", signal_name(v.signal));
    return;
  }
  // A signal that came after the last step's check (during the last validation, save or hooks)
  // still ends the run with an error: whoever sent it sees it was received, and every rank agrees.
  throw TrainingError(detail::str_cat("stopped by ", signal_name(v.signal), " (received by rank ", v.signalled,
                                      ") after the last step (step ", progress_.global_step,
                                      "): training had finished and its checkpoints are written"));
}

void FitLoop::end_epoch() {
  metrics_.flush_step_metrics(progress_);
  // The epoch means are in callback_metrics while the hooks run (a monitor on "loss_epoch" sees
  // this epoch's value); what the hooks log with on_epoch joins the same row, logged after them.
  metrics_.publish_epoch(Metrics::Loop::Train);
  hooks_.on_train_epoch_end(*module_);
  metrics_.finish_epoch(Metrics::Loop::Train, progress_);
  // ReduceLROnPlateau with interval "epoch": after the epoch's validation and logging (Lightning's
  // FitLoop.on_advance_end).
  optimization_.plateau_schedulers(
      SchedulerInterval::Epoch, progress_.epoch + 1,
      [this]() -> const std::map<std::string, double>& { return metrics_.callback_metrics(); });
}

bool FitLoop::any_validation_batches(const std::vector<DataLoader*>& val_loaders) const {
  const bool local = std::any_of(val_loaders.begin(), val_loaders.end(), [&](const DataLoader* l) {
    return count_batches(options_.limit_val_batches, *l, "trainer.limit_val_batches") > 0;
  });
  if (strategy_.world_size() == 1) return local;
  // Unpadded validation loaders: a rank may hold no sample while the others do (fewer samples than
  // ranks). Every rank must still validate with them (collectives), so they decide together.
  return strategy_.all_reduce(torch::tensor({local ? 1.0 : 0.0}, torch::kDouble), ReduceOp::Max).item<double>() > 0;
}

void FitLoop::run_validation(LightningModule& module, const std::vector<DataLoader*>& val_loaders) {
  // limit_val_batches: 0 turns validation off (no hooks either), as in Lightning.
  if (!enable_validation_) return;
  auto count = [&](const DataLoader& l) {
    return count_batches(options_.limit_val_batches, l, "trainer.limit_val_batches");
  };
  evaluation_.run(module, val_loaders, RunningStage::Validate, count, progress_, &validation_pending_);
}

void FitLoop::resume_pending(LightningModule& module, const std::vector<DataLoader*>& val_loaders) {
  // [Note: a validation due at the save] A checkpoint written at a batch's end (every_n_train_steps,
  // train_time_interval) or during a validation comes before that batch's validation has its
  // metrics: the resumed fit runs it first, and the step-interval plateau schedulers after it, as
  // the uninterrupted fit did at that batch.
  const bool validate = resume_validation_, schedulers = resume_scheduler_step_;
  resume_validation_ = resume_scheduler_step_ = false;
  if (!validate) return;
  validation_pending_ = enable_validation_;
  run_validation(module, val_loaders);  // clears validation_pending_
  module.train();
  if (schedulers)
    optimization_.plateau_schedulers(
        SchedulerInterval::Step, progress_.global_step,
        [this]() -> const std::map<std::string, double>& { return metrics_.callback_metrics(); });
}

YAML::Node FitLoop::state_dict() const {
  YAML::Node n(YAML::NodeType::Map);
  n["batch_in_epoch"] = progress_.batch_in_epoch;
  if (progress_.epoch_done) n["epoch_done"] = true;
  n["epoch"] = progress_.epoch;
  n["global_step"] = progress_.global_step;
  if (data_shape_.batch_size > 0) {
    n["batch_size"] = data_shape_.batch_size;
    n["world_size"] = data_shape_.world_size;
  }
  if (data_shape_.samples >= 0) n["train_samples"] = data_shape_.samples;
  if (data_shape_.shuffle) {
    n["shuffle"] = *data_shape_.shuffle;
    n["seed"] = data_shape_.seed;
  }
  // Saved inside an accumulation window: how many of its micro-batches ran (their gradients are
  // not in the checkpoint; see [Note: whole accumulation windows]).
  if (window_open_ && progress_.batch_in_epoch > 0) n["accumulated_batches"] = progress_.batch_in_epoch % accumulate_;
  // (A resumed fit's own pending validation counts until it ran: LearningRateFinder saves and
  // restores before it.)
  if (validation_pending_ || resume_validation_) {
    n["validation_pending"] = true;
    if (validation_pending_ ? scheduler_step_pending_ : resume_scheduler_step_) n["scheduler_step_pending"] = true;
  }
  return n;
}

void FitLoop::load_state_dict(const YAML::Node& state) {
  progress_.epoch = state["epoch"].as<int64_t>();
  progress_.global_step = state["global_step"].as<int64_t>();
  progress_.batch_in_epoch = state["batch_in_epoch"] ? state["batch_in_epoch"].as<int64_t>() : 0;
  progress_.epoch_done = state["epoch_done"] && state["epoch_done"].as<bool>();
  DataShape saved;
  if (state["batch_size"]) saved.batch_size = state["batch_size"].as<int64_t>();
  if (state["world_size"]) saved.world_size = state["world_size"].as<int64_t>();
  if (state["train_samples"]) saved.samples = state["train_samples"].as<int64_t>();
  if (state["shuffle"]) saved.shuffle = state["shuffle"].as<bool>();
  if (state["seed"]) saved.seed = state["seed"].as<uint64_t>();
  saved.accumulated = state["accumulated_batches"] ? state["accumulated_batches"].as<int64_t>() : 0;
  saved_ = saved;
  resume_validation_ = state["validation_pending"] && state["validation_pending"].as<bool>();
  resume_scheduler_step_ = state["scheduler_step_pending"] && state["scheduler_step_pending"].as<bool>();
}

}  // namespace volt
