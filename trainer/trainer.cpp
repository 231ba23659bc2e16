// The Trainer: builds the strategy and its parts, and wires them for fit / validate / test.
#include "volt/trainer/trainer.h"

#include <spdlog/spdlog.h>
#include <torch/csrc/autograd/anomaly_mode.h>
#include <torch/torch.h>

#include <cmath>
#include <optional>

#include "volt/callbacks/model_checkpoint.h"
#include "volt/callbacks/model_summary.h"
#include "volt/callbacks/progress_bar.h"
#include "volt/core/errors.h"
#include "volt/core/signals.h"
#include "volt/trainer/strategy_factory.h"

namespace volt {

namespace {
TrainerOptions validated(TrainerOptions o) {
  o.validate();
  return o;
}

std::unique_ptr<Strategy> non_null(std::unique_ptr<Strategy> s) {
  VOLT_CHECK(s != nullptr, ConfigError, "Trainer: strategy is null");
  return s;
}
}  // namespace

Trainer::Trainer(TrainerOptions options, std::vector<std::shared_ptr<Callback>> callbacks)
    : options_(validated(std::move(options))), strategy_(make_strategy(options_)), callbacks_(std::move(callbacks)) {}

Trainer::Trainer(TrainerOptions options, std::unique_ptr<Strategy> strategy,
                 std::vector<std::shared_ptr<Callback>> callbacks)
    : options_(validated(std::move(options))),
      strategy_(non_null(std::move(strategy))),
      callbacks_(std::move(callbacks)) {}

Trainer::~Trainer() = default;

void Trainer::setup(LightningModule& module, const std::string& stage) {
  module_ = &module;
  module.attach(this, this);
  if (module_ready_) return;
  // Capabilities first: fail before any work.
  if (options_.gradient_clip_val && *options_.gradient_clip_val > 0)
    VOLT_CHECK(strategy_->supports_gradient_clipping(options_.gradient_clip_algorithm.value()), ConfigError,
               "config key 'trainer.gradient_clip_algorithm': strategy '", strategy_->name(), "' cannot clip by ",
               options_.gradient_clip_algorithm);
  const std::string why = strategy_->precision_unsupported_reason(strategy_->precision());
  VOLT_CHECK(why.empty(), ConfigError, "config key 'trainer.precision': ", why);

  strategy_->setup_environment();
  spdlog::set_pattern(strategy_->world_size() > 1
                          ? "[%H:%M:%S] [rank " + std::to_string(strategy_->global_rank()) + "] [%^%l%$] %v"
                          : "[%H:%M:%S] [%^%l%$] %v");
  if (!strategy_->is_global_zero()) spdlog::set_level(spdlog::level::warn);
  if (options_.deterministic) at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
  if (options_.seed) torch::manual_seed(static_cast<uint64_t>(*options_.seed));

  module.configure_model();
  strategy_->setup_module(module);
  if (stage == "fit") {
    opt_config_ = module.configure_optimizers();
    VOLT_CHECK(opt_config_.optimizer != nullptr, ConfigError, "configure_optimizers() returned no optimizer");
    VOLT_CHECK(opt_config_.interval.is_valid(), ConfigError,
               "configure_optimizers(): lr scheduler interval must be 'step' or 'epoch', got '", opt_config_.interval,
               "'");
    VOLT_CHECK(opt_config_.frequency >= 1, ConfigError, "configure_optimizers(): lr scheduler frequency must be >= 1");
    auto& groups = opt_config_.optimizer->param_groups();
    for (size_t g = 0; g < groups.size(); ++g) {
      const double lr = groups[g].options().get_lr();
      VOLT_CHECK(std::isfinite(lr) && lr >= 0, ConfigError, "configure_optimizers(): param group ", g, " has lr ", lr,
                 "; the learning rate must be a finite number >= 0");
    }
    strategy_->setup_optimizer(module, opt_config_);
  }
  add_default_callbacks(stage);
  if (options_.logger && strategy_->is_global_zero() && !logger_) {
    logger_ = std::make_unique<CSVLogger>(options_.default_root_dir);
    logger_->log_hyperparams(module.hparams());
    if (config_) logger_->save_config(config_);
    metrics_.set_logger(logger_.get());
  }
  module_ready_ = true;
  hooks_.setup(module, stage);
}

void Trainer::add_default_callbacks(const std::string& stage) {
  // As Lightning adds them, unless the user passed one of the kind.
  auto has = [&](auto* probe) {
    using T = std::remove_pointer_t<decltype(probe)>;
    for (auto& c : callbacks_)
      if (dynamic_cast<T*>(c.get())) return true;
    return false;
  };
  if (options_.enable_progress_bar && !has(static_cast<ProgressBar*>(nullptr)))
    callbacks_.push_back(std::make_shared<ProgressBar>());
  if (options_.enable_model_summary && !has(static_cast<ModelSummary*>(nullptr)))
    callbacks_.push_back(std::make_shared<ModelSummary>());
  if (stage == "fit" && options_.enable_checkpointing && !has(static_cast<ModelCheckpoint*>(nullptr))) {
    ModelCheckpointOptions mc;
    mc.save_last = true;  // volt default: ckpt_path "last" always has something to resume from
    callbacks_.push_back(std::make_shared<ModelCheckpoint>(mc));
  }
}

void Trainer::finish(LightningModule& module, const std::string& stage) {
  if (logger_) logger_->flush();
  hooks_.teardown(module, stage);
  // Give the module back whole (FSDP gathers it), so it can be used or trained again.
  strategy_->teardown(module);
  module_ready_ = false;
  stage_ = RunningStage::None;
  if (stage == "fit") fit_loop_.check_stop_after_fit();  // a signal during the last save is not lost
  // A launched rank that failed is reported here, so no caller has to ask (no-op elsewhere).
  strategy_->finalize();
}

void Trainer::save_checkpoint(const std::string& path, bool weights_only) {
  VOLT_CHECK(module_ != nullptr, CheckpointError, "save_checkpoint('", path, "') called with no module attached");
  checkpoint_connector_.save(*module_, path, weights_only);
}

void Trainer::log_metric(const std::string& name, const torch::Tensor& value, const LogOptions& options) {
  metrics_.log(name, value, options, stage_);
}

void Trainer::fit(LightningModule& module, DataLoader& train_loader, DataLoader* val_loader,
                  const std::string& ckpt_path) {
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
    setup(module, "fit");
    metrics_.reset_epoch(Metrics::Loop::Train);
    metrics_.reset_epoch(Metrics::Loop::Eval);
    strategy_->setup_dataloader(train_loader);
    if (val_loader) strategy_->setup_dataloader(*val_loader);
    if (!resume_from.empty()) checkpoint_connector_.restore(module, resume_from);
    fit_loop_.setup_data(train_loader);
    const BatchLimit& vci = options_.val_check_interval;
    VOLT_CHECK(!val_loader || vci.is_fraction || static_cast<int64_t>(vci.value) <= fit_loop_.num_training_batches(),
               ConfigError, "config key 'trainer.val_check_interval': ", static_cast<int64_t>(vci.value),
               " must be <= the number of training batches (", fit_loop_.num_training_batches(),
               "); to validate less often use check_val_every_n_epoch, to skip validation limit_val_batches: 0");
    hooks_.on_fit_start(module);
    if (val_loader && options_.num_sanity_val_steps != 0 && resume_from.empty()) {
      const int64_t avail = options_.limit_val_batches.apply(val_loader->num_batches());
      const int64_t n = options_.num_sanity_val_steps < 0 ? avail : std::min(avail, options_.num_sanity_val_steps);
      evaluation_loop_.run(module, *val_loader, RunningStage::Sanity, n, fit_loop_.progress());
    }
    fit_loop_.run(module, train_loader, val_loader);
    hooks_.on_fit_end(module);
    finish(module, "fit");
  } catch (const std::exception& e) {
    strategy_->on_exception(e);
    hooks_.on_exception(module, e);
    try {
      if (logger_) logger_->flush();
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
  checkpoint_connector_.save(module, path, /*weights_only=*/false);
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
  setup(module, "validate");
  strategy_->setup_dataloader(loader);
  if (!ckpt_path.empty()) checkpoint_connector_.restore(module, ckpt_path);
  metrics_.reset_epoch(Metrics::Loop::Eval);
  evaluation_loop_.run(module, loader, RunningStage::Validate, options_.limit_val_batches.apply(loader.num_batches()),
                       fit_loop_.progress());
  finish(module, "validate");
  return metrics_.callback_metrics();
}

std::map<std::string, double> Trainer::test(LightningModule& module, DataLoader& loader, const std::string& ckpt_path) {
  setup(module, "test");
  strategy_->setup_dataloader(loader);
  if (!ckpt_path.empty()) checkpoint_connector_.restore(module, ckpt_path);
  metrics_.reset_epoch(Metrics::Loop::Eval);
  evaluation_loop_.run(module, loader, RunningStage::Test, options_.limit_test_batches.apply(loader.num_batches()),
                       fit_loop_.progress());
  finish(module, "test");
  return metrics_.callback_metrics();
}

}  // namespace volt
