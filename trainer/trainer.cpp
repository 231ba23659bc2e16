// The Trainer: builds the strategy and its parts, and wires them for fit / validate / test.
#include "volt/trainer/trainer.h"

#include <spdlog/spdlog.h>
#include <torch/csrc/autograd/anomaly_mode.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <typeinfo>

#include "volt/callbacks/device_stats_monitor.h"
#include "volt/callbacks/lr_monitor.h"
#include "volt/callbacks/model_checkpoint.h"
#include "volt/callbacks/model_summary.h"
#include "volt/callbacks/on_exception_checkpoint.h"
#include "volt/callbacks/progress_bar.h"
#include "volt/callbacks/stochastic_weight_averaging.h"
#include "volt/callbacks/timer.h"
#include "volt/callbacks/weight_averaging.h"
#include "volt/checkpoint/comm_text.h"
#include "volt/core/errors.h"
#include "volt/core/signals.h"
#include "volt/strategies/parallel_strategy.h"
#include "volt/trainer/config_agreement.h"
#include "volt/trainer/rank_zero.h"
#include "volt/trainer/strategy_factory.h"

namespace volt {

namespace {
/// The trainer options every rank's rendezvous compares (trainer/config_agreement.h).
void give_job_config(Strategy& strategy, const TrainerOptions& options) {
  if (auto* p = dynamic_cast<ParallelStrategy*>(&strategy))
    p->set_job_config(YAML::Dump(detail::shared_trainer_config(options)));
}

TrainerOptions validated(TrainerOptions o) {
  o.validate();
  o.apply_debugging_flags();
  return o;
}

/// Before each checkpoint save: the metrics so far reach the logger's files, as Lightning saves its
/// logger at each save. A failed write (a full disk) must not cost the checkpoint: the rows stay
/// buffered for the next try.
/// Lightning's warning for a stage whose loaders hold no sample at all: the call then runs no step
/// and writes nothing, which should not pass unnoticed.
void warn_if_empty(const std::vector<DataLoader*>& loaders, const std::string& stage) {
  for (const DataLoader* l : loaders)
    if (l->is_iterable() || l->dataset().size() > 0) return;
  spdlog::warn("{}: the dataloaders hold no sample (total length zero): no {} step runs and nothing is {}", stage,
               stage, stage == "predict" ? "predicted or written" : "computed or logged");
}

void flush_before_save(Logger* logger) {
  if (!logger) return;
  try {
    logger->flush();
  } catch (const std::exception& e) {
    spdlog::warn("{} (the metrics stay buffered; saving the checkpoint anyway)", e.what());
  }
}

/// Lightning refuses this pair at construction (the flag would be overruled): the Trainer's own
/// callbacks, not those a module's configure_callbacks() adds later. fast_dev_run turns
/// checkpointing off itself and keeps the callback, which saves nothing then.
void check_callbacks(const TrainerOptions& o, const std::vector<std::shared_ptr<Callback>>& callbacks) {
  if (o.enable_checkpointing || o.fast_dev_run) return;
  for (const auto& c : callbacks)
    VOLT_CHECK(!dynamic_cast<const ModelCheckpoint*>(c.get()), ConfigError,
               "config key 'trainer.enable_checkpointing' is false, but trainer.callbacks holds a ModelCheckpoint; "
               "set enable_checkpointing: true to save with it, or remove the callback");
}

std::unique_ptr<Strategy> non_null(std::unique_ptr<Strategy> s) {
  VOLT_CHECK(s != nullptr, ConfigError, "Trainer: strategy is null");
  return s;
}
}  // namespace

Trainer::Trainer(TrainerOptions options, std::vector<std::shared_ptr<Callback>> callbacks)
    : options_(validated(std::move(options))), strategy_(make_strategy(options_)), callbacks_(std::move(callbacks)) {
  check_callbacks(options_, callbacks_);
  init_profiler();
}

Trainer::Trainer(TrainerOptions options, std::unique_ptr<Strategy> strategy,
                 std::vector<std::shared_ptr<Callback>> callbacks)
    : options_(validated(std::move(options))),
      strategy_(non_null(std::move(strategy))),
      callbacks_(std::move(callbacks)) {
  check_callbacks(options_, callbacks_);
  init_profiler();
}

void Trainer::init_profiler() {
  profiler_ = make_profiler(options_.profiler);
  strategy_->set_profiler(profiler_.get());
  hooks_.set_profiler(profiler_.get());
}

Trainer::~Trainer() = default;

void Trainer::set_loggers(std::vector<std::shared_ptr<Logger>> loggers) {
  VOLT_CHECK(!logger_, ConfigError, "Trainer::set_loggers: call it before the first fit / validate / test");
  for (size_t i = 0; i < loggers.size(); ++i)
    VOLT_CHECK(loggers[i] != nullptr, ConfigError, "Trainer::set_loggers: logger ", i, " is null");
  loggers_ = std::move(loggers);
  loggers_given_ = true;
}

void Trainer::setup(LightningModule& module, const std::string& stage) {
  module_ = &module;
  module.attach(this, this, this, this);
  if (module_ready_) return;
  // Capabilities first: fail before any work.
  if (options_.gradient_clip_val && *options_.gradient_clip_val > 0)
    VOLT_CHECK(strategy_->supports_gradient_clipping(options_.gradient_clip_algorithm.value()), ConfigError,
               "config key 'trainer.gradient_clip_algorithm': strategy '", strategy_->name(), "' cannot clip by ",
               options_.gradient_clip_algorithm);
  const std::string why = strategy_->precision_unsupported_reason(strategy_->precision());
  VOLT_CHECK(why.empty(), ConfigError, "config key 'trainer.precision': ", why);
  if (options_.cuda_graph) {
    const std::string graph_why = strategy_->cuda_graph_unsupported_reason();
    VOLT_CHECK(graph_why.empty(), ConfigError, "config key 'trainer.cuda_graph': ", graph_why);
  }
  strategy_->enable_cuda_graphs(options_.cuda_graph);

  give_job_config(*strategy_, options_);
  strategy_->setup_environment();
  detail::check_ranks_share_config(*strategy_, detail::shared_config(options_, module.hparams()));
  spdlog::set_pattern(strategy_->world_size() > 1
                          ? "[%H:%M:%S] [rank " + std::to_string(strategy_->global_rank()) + "] [%^%l%$] %v"
                          : "[%H:%M:%S] [%^%l%$] %v");
  if (!strategy_->is_global_zero()) spdlog::set_level(spdlog::level::warn);
  if (options_.deterministic) at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
  if (options_.seed) torch::manual_seed(static_cast<uint64_t>(*options_.seed));
  // [Note: inference mode] (evaluation_loop.cpp): not with Gloo collectives, nor FSDP's buffers.
  const bool inference = options_.inference_mode && strategy_->name() != "fsdp" &&
                         (strategy_->world_size() == 1 || strategy_->accelerator() == "cuda");
  evaluation_loop_.set_inference_mode(inference);
  predict_loop_.set_inference_mode(inference);

  if (profiler_ && stage != "fit" && strategy_->is_global_zero())
    spdlog::warn("trainer.profiler profiles fit only: {} runs without it (Lightning profiles every stage)", stage);
  // Lightning's order: prepare_data, the callbacks' and the module's setup, then configure_model.
  prepare_module_data(module);
  add_module_callbacks(module);
  add_default_callbacks(stage);
  hooks_.setup(module, stage);
  module.configure_model();
  strategy_->setup_module(module);
  if (stage == "fit") {
    optimization_.configure(module);
  }
  if (!strategy_->is_global_zero()) loggers_.clear();
  // fast_dev_run: no logger, the given ones included (Lightning's DummyLogger).
  if (!logger_ && strategy_->is_global_zero() && !options_.fast_dev_run &&
      (loggers_given_ ? !loggers_.empty() : bool(options_.logger))) {
    if (!loggers_given_) loggers_ = create_loggers(options_.logger, options_.default_root_dir);
    logger_ = loggers_.size() == 1 ? loggers_.front() : std::make_shared<LoggerCollection>(loggers_);
    // One hparams.yaml for both, as Lightning merges the module's and the data module's.
    YAML::Node hp = YAML::Clone(module.hparams());
    if (datamodule_)
      for (const auto& kv : datamodule_->hparams()) hp[kv.first.Scalar()] = YAML::Clone(kv.second);
    logger_->log_hyperparams(hp);
    if (config_) logger_->save_config(config_);
    metrics_.set_logger(logger_.get());
  }
  module_ready_ = true;
}

void Trainer::prepare_module_data(LightningModule& module) {
  if (data_prepared_for_ == &module) return;
  detail::run_on_global_zero(
      *strategy_, [&] { module.prepare_data(); }, "the module's prepare_data()");
  data_prepared_for_ = &module;
}

namespace {
/// Lightning's Checkpoint callbacks (ModelCheckpoint, OnExceptionCheckpoint): they run after every
/// other callback at each event, so that they save what the others did there (an averaging
/// callback's trained weights back in the model after an error, for one).
bool is_checkpoint_callback(const Callback& c) {
  return dynamic_cast<const ModelCheckpoint*>(&c) != nullptr ||
         dynamic_cast<const OnExceptionCheckpoint*>(&c) != nullptr;
}

/// At most one weight-averaging callback: two would each swap their copy in for validation
/// (training would go on from the other's average) and copy it into the model at the end.
void check_one_averaging(const std::vector<std::shared_ptr<Callback>>& callbacks) {
  std::string averaging;
  for (const auto& c : callbacks) {
    if (!dynamic_cast<const WeightAveraging*>(c.get()) && !dynamic_cast<const StochasticWeightAveraging*>(c.get()))
      continue;
    const std::string type = c10::demangle(typeid(*c).name());
    VOLT_CHECK(averaging.empty(), ConfigError, "trainer.callbacks holds two weight-averaging callbacks (", averaging,
               " and ", type,
               "): each would put its average into the model, for validation and at the end of fit; "
               "keep one");
    averaging = type;
  }
}

/// Stateful callbacks (a state_dict() with something in it) must have distinct state keys: two
/// under one key would overwrite each other's state in checkpoints, and a resumed fit would give
/// both the last one's (Lightning refuses them too).
void check_state_keys(const std::vector<std::shared_ptr<Callback>>& callbacks) {
  std::map<std::string, std::string> seen;  // state key -> the first one's type
  for (const auto& c : callbacks) {
    const YAML::Node s = c->state_dict();
    if (!s || s.IsNull() || (s.IsMap() && s.size() == 0)) continue;
    const std::string key = c->state_key();
    const std::string type = c10::demangle(typeid(*c).name());
    const auto [it, fresh] = seen.emplace(key, type);
    VOLT_CHECK(fresh, ConfigError, "trainer.callbacks holds two callbacks with the state key '", key, "' (", it->second,
               " and ", type,
               "): their states would overwrite each other in checkpoints. Keep one, or give them options that tell "
               "them apart (ModelCheckpoint: monitor, mode, every_n_train_steps, every_n_epochs or "
               "train_time_interval; EarlyStopping: monitor or mode)");
  }
}
}  // namespace

void Trainer::add_module_callbacks(LightningModule& module) {
  std::vector<std::shared_ptr<Callback>> mine = module.configure_callbacks();
  if (mine.empty()) return;
  for (size_t i = 0; i < mine.size(); ++i)
    VOLT_CHECK(mine[i] != nullptr, ConfigError, "configure_callbacks(): callback ", i, " is null");
  // Lightning's rule: a module callback replaces the Trainer's callbacks of its type.
  auto same_type = [&](const Callback& c) {
    for (const auto& m : mine)
      if (typeid(*m) == typeid(c)) return true;
    return false;
  };
  std::vector<std::shared_ptr<Callback>> merged;
  for (auto& c : callbacks_)
    if (!same_type(*c)) merged.push_back(c);
  merged.insert(merged.end(), mine.begin(), mine.end());
  callbacks_ = std::move(merged);
}

torch::Tensor Trainer::all_gather(const torch::Tensor& tensor, bool sync_grads) {
  return strategy_->all_gather(tensor, sync_grads);
}

void Trainer::add_default_callbacks(const std::string& stage) {
  // As Lightning adds them, unless the user passed one of the kind.
  auto count = [&](auto* probe) {
    using T = std::remove_pointer_t<decltype(probe)>;
    int n = 0;
    for (auto& c : callbacks_) n += dynamic_cast<T*>(c.get()) != nullptr;
    return n;
  };
  auto has = [&](auto* probe) { return count(probe) > 0; };
  // Lightning refuses these rather than drop one side of them.
  const int bars = count(static_cast<ProgressBar*>(nullptr));
  VOLT_CHECK(bars <= 1, ConfigError, "trainer.callbacks holds ", bars, " ProgressBar callbacks; one is supported");
  VOLT_CHECK(bars == 0 || options_.enable_progress_bar, ConfigError,
             "config key 'trainer.enable_progress_bar' is false, but trainer.callbacks holds a ProgressBar; remove "
             "one of them");
  // Both monitors act in fit only (Lightning checks them in on_train_start, and setup for "fit").
  bool lr_monitor = stage == "fit" && has(static_cast<LearningRateMonitor*>(nullptr));
  bool stats_monitor = stage == "fit" && has(static_cast<DeviceStatsMonitor*>(nullptr));
  // fast_dev_run logs nowhere on purpose (Lightning's DummyLogger; validated() turned the logger
  // off): not a misconfiguration.
  bool logging = options_.fast_dev_run || (loggers_given_ ? !loggers_.empty() : bool(options_.logger));
  if (strategy_->world_size() > 1) {
    // One collective on every rank, whatever its callbacks: ranks other than 0 drop their loggers at
    // their first set-up (rank 0's view decides), and a monitor given to one rank alone counts too.
    const torch::Tensor any = strategy_->all_reduce(torch::tensor({strategy_->is_global_zero() && !logging ? 1.0 : 0.0,
                                                                   lr_monitor ? 1.0 : 0.0, stats_monitor ? 1.0 : 0.0},
                                                                  torch::kDouble),
                                                    ReduceOp::Max);
    logging = any[0].item<double>() == 0.0;
    lr_monitor = any[1].item<double>() > 0.0;
    stats_monitor = any[2].item<double>() > 0.0;
  }
  VOLT_CHECK(logging || !lr_monitor, ConfigError,
             "trainer.callbacks holds a LearningRateMonitor, but trainer.logger is off: what it logs would go "
             "nowhere; turn the logger on or remove the callback");
  VOLT_CHECK(logging || !stats_monitor, ConfigError,
             "trainer.callbacks holds a DeviceStatsMonitor, but trainer.logger is off: what it logs would go "
             "nowhere; turn the logger on or remove the callback");
  if (options_.enable_progress_bar && !has(static_cast<ProgressBar*>(nullptr)))
    callbacks_.push_back(std::make_shared<ProgressBar>());
  if (options_.enable_model_summary && !has(static_cast<ModelSummary*>(nullptr)))
    callbacks_.push_back(std::make_shared<ModelSummary>());
  if (stage == "fit" && options_.max_time && !has(static_cast<Timer*>(nullptr))) {
    TimerOptions to;
    to.duration = options_.max_time;
    callbacks_.push_back(std::make_shared<Timer>(to));
  } else if (stage == "fit" && options_.max_time && strategy_->is_global_zero()) {
    spdlog::warn(
        "trainer.max_time is ignored: trainer.callbacks holds a Timer, whose duration bounds the fit instead (as "
        "Lightning); give the Timer the duration, or remove it");
  }
  // Lightning's rule: an unset max_epochs is 1000 only when neither max_steps nor a Timer bounds the fit.
  // A Timer without a duration only measures: it bounds nothing.
  bool timed = false;
  for (auto& c : callbacks_)
    if (auto* timer = dynamic_cast<Timer*>(c.get())) timed = timed || timer->options().duration.has_value();
  if (stage == "fit" && !options_.max_epochs && timed) options_.max_epochs = -1;
  if (stage == "fit" && options_.enable_checkpointing && !has(static_cast<ModelCheckpoint*>(nullptr))) {
    ModelCheckpointOptions mc;
    mc.save_last = true;  // volt default: ckpt_path "last" always has something to resume from
    callbacks_.push_back(std::make_shared<ModelCheckpoint>(mc));
  }
  // Checkpoint callbacks last (Lightning's _reorder_callbacks), the others in the order given.
  std::stable_partition(callbacks_.begin(), callbacks_.end(),
                        [](const std::shared_ptr<Callback>& c) { return !is_checkpoint_callback(*c); });
  check_one_averaging(callbacks_);
  check_state_keys(callbacks_);
}

void Trainer::finish(LightningModule& module, const std::string& stage) {
  if (logger_) logger_->finalize("success");
  hooks_.teardown(module, stage);
  if (stage == "fit") optimization_.release();
  // Interceptors off; FSDP keeps the module sharded (strategy().unshard_module gathers it).
  strategy_->teardown(module);
  module_ready_ = false;
  stage_ = RunningStage::None;
  if (stage == "fit") fit_loop_.check_stop_after_fit();  // a signal during the last save is not lost
  // A launched rank that failed is reported here, so no caller has to ask (no-op elsewhere).
  strategy_->finalize();
}

void Trainer::prepare_data(LightningDataModule& datamodule, const std::string& stage) {
  give_job_config(*strategy_, options_);
  strategy_->setup_environment();  // the process group: the other ranks wait for rank 0's files
  data_connector_.prepare(datamodule, stage);
  prepared_ = &datamodule;
  prepared_stage_ = stage;
}

void Trainer::prepare_once(LightningDataModule& datamodule, const std::string& stage) {
  const bool done = prepared_ == &datamodule && prepared_stage_ == stage;
  prepared_ = nullptr;
  if (!done) data_connector_.prepare(datamodule, stage);
}

void Trainer::save_checkpoint(const std::string& path, bool weights_only) {
  VOLT_CHECK(module_ != nullptr, CheckpointError, "save_checkpoint('", path, "') called with no module attached");
  flush_before_save(logger_.get());
  checkpoint_connector_.save(*module_, path, weights_only);
}

void Trainer::restore_checkpoint_in_fit(const std::string& path) {
  VOLT_CHECK(module_ != nullptr && stage_ != RunningStage::Predict && !optimization_.empty(), CheckpointError,
             "restore_checkpoint_in_fit('", path, "') called outside fit");
  for (const auto& c : optimization_.optimizers().configs) c.optimizer->state().clear();
  checkpoint_connector_.restore(*module_, path, /*fitting=*/true);
  metrics_.reset_epoch(Metrics::Loop::Train);
  metrics_.reset_epoch(Metrics::Loop::Eval);
  should_stop = false;
}

void Trainer::remove_checkpoint(const std::string& path) { checkpoint_connector_.remove_checkpoint(path); }

void Trainer::wait_for_ranks() {
  if (auto* parallel = dynamic_cast<ParallelStrategy*>(strategy_.get())) parallel->wait_for_ranks();
}

void Trainer::log_metric(const std::string& name, const torch::Tensor& value, const LogOptions& options) {
  metrics_.log(name, value, options, stage_);
}

void Trainer::wrap_unit(torch::nn::Module& module) { strategy_->wrap(module); }

void Trainer::fit(LightningModule& module, DataLoader& train_loader, DataLoader* val_loader,
                  const std::string& ckpt_path) {
  std::vector<DataLoader*> vals;
  if (val_loader) vals.push_back(val_loader);
  run_fit(module, nullptr, &train_loader, vals, ckpt_path);
}

void Trainer::fit(LightningModule& module, DataLoader& train_loader, const DataLoaders& val_loaders,
                  const std::string& ckpt_path) {
  run_fit(module, nullptr, &train_loader, loader_ptrs(val_loaders), ckpt_path);
}

void Trainer::fit(LightningModule& module, LightningDataModule& datamodule, const std::string& ckpt_path) {
  run_fit(module, &datamodule, nullptr, {}, ckpt_path);
}

void Trainer::run_fit(LightningModule& module, LightningDataModule* datamodule, DataLoader* train_loader,
                      std::vector<DataLoader*> val_loaders, const std::string& ckpt_path) {
  std::shared_ptr<DataLoader> dm_train;  // the data module's loaders live through the call
  DataLoaders dm_vals;
  bool finished = false, profiler_done = false;
  try {
    const int requeue_signal = options_.slurm.active_signal();
    detail::StopSignals stop_signals(requeue_signal);  // SIGINT/SIGTERM end fit cleanly (FitLoop::check_step)
    std::string resume_from = ckpt_path;
    if (resume_from.empty() && requeue_signal) {
      resume_from = detail::hpc_resume_path(options_.default_root_dir);
      if (!resume_from.empty()) spdlog::info("SLURM job requeued: resuming from {}", resume_from);
    }
    fit_loop_.set_requeue(requeue_signal, [this, &module] { return save_and_requeue(module); });
    std::optional<torch::autograd::DetectAnomalyGuard> anomaly;
    if (options_.detect_anomaly) anomaly.emplace();
    datamodule_ = datamodule;
    setup(module, "fit");
    if (options_.fast_dev_run && is_global_zero())
      spdlog::info(
          "Running in `fast_dev_run` mode: will run the requested loop using {} batch(es). Logging and "
          "checkpointing is suppressed.",
          options_.fast_dev_run.batches);
    // Every rank's trace goes beside rank 0's (only rank 0 has a logger, and so a log_dir).
    // Collective on every rank, profiler or not: trainer.profiler may differ between nodes.
    const std::string rank0_log_dir = detail::broadcast_text(strategy_->state_comm(), log_dir(), 0);
    if (profiler_)
      profiler_->setup("fit", rank0_log_dir.empty() ? options_.default_root_dir : rank0_log_dir,
                       strategy_->global_rank());
    if (datamodule) {
      prepare_once(*datamodule, "fit");
      dm_train = datamodule->train_dataloader();
      VOLT_CHECK(dm_train != nullptr, ConfigError, "the data module's train_dataloader() returned no loader");
      train_loader = dm_train.get();
      dm_vals = datamodule->val_dataloader();
      val_loaders = loader_ptrs(dm_vals);
    }
    checkpoint_connector_.set_datamodule(datamodule);
    checkpoint_connector_.begin_async_saves();
    accumulate_grad_batches = options_.accumulate_grad_batches;
    train_loader_ = train_loader;
    val_loaders_ = val_loaders;
    if (datamodule && options_.reload_dataloaders_every_n_epochs > 0) {
      fit_loop_.set_reload([this, datamodule, &dm_train, &dm_vals] {
        dm_train = datamodule->train_dataloader();
        VOLT_CHECK(dm_train != nullptr, ConfigError, "the data module's train_dataloader() returned no loader");
        dm_vals = datamodule->val_dataloader();
        FitLoop::Loaders l{dm_train.get(), loader_ptrs(dm_vals)};
        data_connector_.attach(*l.train);
        for (DataLoader* v : l.val) data_connector_.attach(*v, /*pad=*/false);  // [Note: every sample once]
        train_loader_ = l.train;
        val_loaders_ = l.val;
        return l;
      });
    } else {
      fit_loop_.set_reload({});
      if (options_.reload_dataloaders_every_n_epochs > 0 && is_global_zero())
        spdlog::warn(
            "trainer.reload_dataloaders_every_n_epochs is {}, but fit was given loaders rather than a "
            "LightningDataModule: there is no train_dataloader() to call again, so the same loaders are used every "
            "epoch",
            options_.reload_dataloaders_every_n_epochs);
    }
    metrics_.reset_epoch(Metrics::Loop::Train);
    metrics_.reset_epoch(Metrics::Loop::Eval);
    data_connector_.attach(*train_loader);
    for (DataLoader* v : val_loaders) data_connector_.attach(*v, /*pad=*/false);  // [Note: every sample once]
    if (resume_from == "last" && checkpoint_connector_.find_last().empty()) {
      // Lightning's rule for fit: nothing saved yet (a first run, or a restart before the first
      // save) means a fresh start, so one command line serves every attempt of a job.
      if (is_global_zero())
        spdlog::warn(
            "ckpt_path='last' is set, but no last checkpoint exists under '{}/checkpoints' yet: training "
            "starts from the beginning",
            options_.default_root_dir);
      resume_from.clear();
    }
    ckpt_path_ = resume_from.empty() ? std::string() : checkpoint_connector_.resolve_ckpt_path(resume_from);
    // Lightning's trainer.ckpt_path for "last" names last.ckpt itself: a `save_last: link` target it
    // led to is not what the run resumed from by name, so ModelCheckpoint may replace it.
    if (resume_from == "last" && std::filesystem::path(ckpt_path_).filename().string().rfind("last", 0) != 0)
      ckpt_path_ = (std::filesystem::path(ckpt_path_).parent_path() / "last.ckpt").string();
    if (!resume_from.empty()) checkpoint_connector_.restore(module, resume_from, /*fitting=*/true);
    fit_loop_.setup_data(*train_loader,
                         resume_from.empty() ? "" : checkpoint_connector_.resolve_ckpt_path(resume_from));
    const BatchLimit& vci = options_.val_check_interval;
    VOLT_CHECK(
        val_loaders.empty() || vci.is_fraction || static_cast<int64_t>(vci.value) <= fit_loop_.num_training_batches(),
        ConfigError, "config key 'trainer.val_check_interval': ", static_cast<int64_t>(vci.value),
        " must be <= the number of training batches (", fit_loop_.num_training_batches(),
        "); to validate less often use check_val_every_n_epoch, to skip validation limit_val_batches: 0");
    hooks_.on_fit_start(module);
    if (!val_loaders.empty() && options_.num_sanity_val_steps != 0 && resume_from.empty()) {
      evaluation_loop_.run(
          module, val_loaders, RunningStage::Sanity,
          [&](const DataLoader& l) {
            const int64_t avail = count_batches(options_.limit_val_batches, l, "trainer.limit_val_batches");
            return options_.num_sanity_val_steps < 0 ? avail : std::min(avail, options_.num_sanity_val_steps);
          },
          fit_loop_.progress());
    }
    fit_loop_.run(module, *train_loader, val_loaders);
    checkpoint_connector_.wait_for_saves();  // the last checkpoint is on disk before on_fit_end
    fit_loop_.set_reload({});
    train_loader_ = nullptr;
    val_loaders_.clear();
    hooks_.on_fit_end(module);
    if (datamodule) datamodule->teardown("fit");
    finish(module, "fit");
    finished = true;
    checkpoint_connector_.release_datamodule();
    profiler_done = true;
    if (profiler_) profiler_->teardown();
  } catch (const std::exception& e) {
    fit_loop_.set_reload({});
    train_loader_ = nullptr;
    val_loaders_.clear();
    // The run itself finished (logger finalized, strategy torn down) and only the profiler's trace
    // failed: that error is the command's, reported once by the caller, with no second teardown
    // and no on_exception / "failed" status for a run that completed.
    if (finished) throw;
    try {
      if (profiler_ && !profiler_done) profiler_->teardown();  // what was recorded up to the error is reported too
    } catch (const std::exception& f) {                        // the original error is the one to report
      spdlog::error("{}", f.what());
    }
    // A save still being written is finished as far as this rank can alone; saves are synchronous again.
    checkpoint_connector_.abandon_saves();
    // Lightning's order: the callbacks first, while the ranks can still run a collective together
    // (OnExceptionCheckpoint saves for an error every rank raised); then the other ranks are told.
    try {
      hooks_.on_exception(module, e);    // an OnExceptionCheckpoint's save records the data module too
    } catch (const std::exception& f) {  // the original error is the one to report
      spdlog::error("{}", f.what());
    }
    checkpoint_connector_.set_datamodule(nullptr);
    strategy_->on_exception(e);
    try {
      if (logger_) logger_->finalize("failed");
    } catch (const std::exception& f) {  // the original error is the one to report
      spdlog::error("{}", f.what());
    }
    stage_ = RunningStage::None;
    throw;
  }
}

std::string Trainer::save_and_requeue(LightningModule& module) {
  // Rank 0 numbers the file: the ranks must agree before any of them writes.
  const std::string dir = options_.default_root_dir;
  const int64_t n = strategy_->broadcast(torch::tensor({detail::next_hpc_index(dir)}, torch::kLong), 0).item<int64_t>();
  const std::string path = detail::hpc_checkpoint_path(dir, n);
  flush_before_save(logger_.get());
  checkpoint_connector_.save(module, path, /*weights_only=*/false);
  checkpoint_connector_.wait_for_saves();  // on disk before the job is requeued
  const std::string job = detail::slurm_batch_job_id();
  if (is_global_zero()) {
    detail::slurm_requeue(job);
    spdlog::info("saved {} and requeued SLURM job {}", path, job);
  }
  return detail::str_cat("requeue signal: saved ", path, " at step ", global_step(), " and requeued SLURM job ", job,
                         "; the requeued job resumes from it");
}

std::map<std::string, double> Trainer::validate(LightningModule& module, DataLoader& loader,
                                                const std::string& ckpt_path) {
  return run_evaluation(module, nullptr, {&loader}, RunningStage::Validate, ckpt_path);
}

std::map<std::string, double> Trainer::validate(LightningModule& module, LightningDataModule& datamodule,
                                                const std::string& ckpt_path) {
  return run_evaluation(module, &datamodule, {}, RunningStage::Validate, ckpt_path);
}

std::map<std::string, double> Trainer::test(LightningModule& module, DataLoader& loader, const std::string& ckpt_path) {
  return run_evaluation(module, nullptr, {&loader}, RunningStage::Test, ckpt_path);
}

std::map<std::string, double> Trainer::test(LightningModule& module, LightningDataModule& datamodule,
                                            const std::string& ckpt_path) {
  return run_evaluation(module, &datamodule, {}, RunningStage::Test, ckpt_path);
}

std::map<std::string, double> Trainer::run_evaluation(LightningModule& module, LightningDataModule* datamodule,
                                                      std::vector<DataLoader*> loaders, RunningStage stage,
                                                      const std::string& ckpt_path) {
  const bool val = stage == RunningStage::Validate;
  const std::string name = val ? "validate" : "test";
  datamodule_ = datamodule;
  checkpoint_connector_.set_datamodule(nullptr);  // a later save_checkpoint records no earlier fit's data module
  setup(module, name);
  DataLoaders held;  // the data module's loaders live through the call
  if (datamodule) {
    prepare_once(*datamodule, name);
    held = val ? datamodule->val_dataloader() : datamodule->test_dataloader();
    VOLT_CHECK(!held.empty(), ConfigError, name, ": the data module's ", val ? "val" : "test",
               "_dataloader() returned no loader");
    loaders = loader_ptrs(held);
  }
  for (DataLoader* l : loaders) data_connector_.attach(*l, /*pad=*/false);  // [Note: every sample once]
  warn_if_empty(loaders, name);
  ckpt_path_ = ckpt_path.empty() ? std::string() : checkpoint_connector_.resolve_ckpt_path(ckpt_path);
  if (!ckpt_path.empty()) checkpoint_connector_.restore(module, ckpt_path, /*fitting=*/false);
  metrics_.reset_epoch(Metrics::Loop::Eval);
  const BatchLimit& limit = val ? options_.limit_val_batches : options_.limit_test_batches;
  const std::string key = val ? "trainer.limit_val_batches" : "trainer.limit_test_batches";
  evaluation_loop_.run(
      module, loaders, stage, [&](const DataLoader& l) { return count_batches(limit, l, key); }, fit_loop_.progress());
  if (datamodule) datamodule->teardown(name);
  finish(module, name);
  return metrics_.callback_metrics();
}

std::vector<Batch> Trainer::predict(LightningModule& module, DataLoader& loader, const std::string& ckpt_path,
                                    bool return_predictions) {
  return run_predict(module, nullptr, {&loader}, ckpt_path, return_predictions);
}

std::vector<Batch> Trainer::predict(LightningModule& module, LightningDataModule& datamodule,
                                    const std::string& ckpt_path, bool return_predictions) {
  return run_predict(module, &datamodule, {}, ckpt_path, return_predictions);
}

std::vector<Batch> Trainer::run_predict(LightningModule& module, LightningDataModule* datamodule,
                                        std::vector<DataLoader*> loaders, const std::string& ckpt_path, bool keep) {
  datamodule_ = datamodule;
  setup(module, "predict");
  DataLoaders held;
  if (datamodule) {
    prepare_once(*datamodule, "predict");
    held = datamodule->predict_dataloader();
    VOLT_CHECK(!held.empty(), ConfigError, "predict: the data module's predict_dataloader() returned no loader");
    loaders = loader_ptrs(held);
  }
  for (DataLoader* l : loaders) data_connector_.attach(*l, /*pad=*/false);  // [Note: every sample once]
  warn_if_empty(loaders, "predict");
  ckpt_path_ = ckpt_path.empty() ? std::string() : checkpoint_connector_.resolve_ckpt_path(ckpt_path);
  if (!ckpt_path.empty()) checkpoint_connector_.restore(module, ckpt_path, /*fitting=*/false);
  auto outputs = predict_loop_.run(
      module, loaders,
      [&](const DataLoader& l) {
        return count_batches(options_.limit_predict_batches, l, "trainer.limit_predict_batches");
      },
      keep);
  if (datamodule) datamodule->teardown("predict");
  finish(module, "predict");
  return outputs;
}

}  // namespace volt
