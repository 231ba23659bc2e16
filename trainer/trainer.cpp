#include "volt/trainer/trainer.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <filesystem>
#include <torch/version.h>

#include "volt/callbacks/model_checkpoint.h"
#include "volt/checkpoint/checkpoint_reader.h"
#include "volt/checkpoint/rng_state.h"
#include "volt/callbacks/model_summary.h"
#include "volt/callbacks/progress_bar.h"
#include "volt/core/errors.h"
#include "volt/strategies/strategy_factory.h"

#ifndef VOLT_VERSION
#define VOLT_VERSION "0.0.0"
#endif

namespace volt {

namespace fs = std::filesystem;

namespace {
TrainerOptions validated(TrainerOptions o) {
  o.validate();
  return o;
}
}  // namespace

Trainer::Trainer(TrainerOptions options, std::vector<std::shared_ptr<Callback>> callbacks)
    : options_(validated(std::move(options))), callbacks_(std::move(callbacks)) {
  strategy_ = make_strategy(options_);
}

Trainer::Trainer(TrainerOptions options, std::unique_ptr<Strategy> strategy,
                 std::vector<std::shared_ptr<Callback>> callbacks)
    : options_(validated(std::move(options))), strategy_(std::move(strategy)), callbacks_(std::move(callbacks)) {
  VOLT_CHECK(strategy_ != nullptr, ConfigError, "Trainer: strategy is null");
}

Trainer::~Trainer() = default;

template <class F>
void Trainer::call_callbacks(F&& f) {
  for (auto& cb : callbacks_) f(*cb);
}

void Trainer::setup(LightningModule& module, const std::string& stage) {
  module_ = &module;
  module.trainer_ = this;
  if (module_ready_) return;
  // Capabilities first: fail before any work.
  if (options_.gradient_clip_val && *options_.gradient_clip_val > 0)
    VOLT_CHECK(strategy_->supports_gradient_clipping(options_.gradient_clip_algorithm), ConfigError,
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
    VOLT_CHECK(opt_config_.interval == "step" || opt_config_.interval == "epoch", ConfigError,
               "configure_optimizers(): lr scheduler interval must be 'step' or 'epoch', got '", opt_config_.interval, "'");
    VOLT_CHECK(opt_config_.frequency >= 1, ConfigError, "configure_optimizers(): lr scheduler frequency must be >= 1");
    strategy_->setup_optimizer(module, opt_config_);
  }
  // Default callbacks, as Lightning adds them.
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
  if (stage == "fit" && options_.enable_checkpointing && !has(static_cast<ModelCheckpoint*>(nullptr)))
  {
    ModelCheckpointOptions mc;
    mc.save_last = true;  // volt default: ckpt_path "last" always has something to resume from
    callbacks_.push_back(std::make_shared<ModelCheckpoint>(mc));
  }
  if (options_.logger && strategy_->is_global_zero() && !logger_) {
    logger_ = std::make_unique<CSVLogger>(options_.default_root_dir);
    logger_->log_hyperparams(module.hparams());
    if (config_) logger_->save_config(config_);
  }
  module_ready_ = true;
  call_callbacks([&](Callback& c) { c.setup(*this, module, stage); });
}

void Trainer::finish(LightningModule& module, const std::string& stage) {
  if (logger_) logger_->flush();
  call_callbacks([&](Callback& c) { c.teardown(*this, module, stage); });
  // Give the module back whole (FSDP gathers it), so it can be used or trained again.
  strategy_->teardown(module);
  module_ready_ = false;
  stage_ = Stage::None;
}

std::string Trainer::resolve_ckpt_path(const std::string& ckpt_path) const {
  if (ckpt_path != "last") return ckpt_path;
  for (auto& c : callbacks_)
    if (auto* mc = dynamic_cast<ModelCheckpoint*>(c.get())) {
      const std::string p = mc->last_model_path_on_disk(*this);
      if (!p.empty()) return p;
    }
  // validate / test have no checkpoint callback: look where fit's default one writes, as
  // Lightning finds "last" on disk.
  const std::string p = ModelCheckpoint().last_model_path_on_disk(*this);
  if (!p.empty()) return p;
  throw CheckpointError("ckpt_path='last': no last.ckpt found under '" + options_.default_root_dir +
                        "/checkpoints' (is enable_checkpointing on with save_last?)");
}

void Trainer::restore(const std::string& ckpt_path) {
  const std::string path = resolve_ckpt_path(ckpt_path);
  spdlog::info("Restoring states from the checkpoint path at {}", path);
  // Every rank reads for itself (FSDP: only its own ranges); all agree before going on, so a rank
  // that cannot read fails the job instead of leaving the others in a collective.
  std::unique_ptr<CheckpointReader> reader;
  std::string error;
  try {
    reader = std::make_unique<CheckpointReader>(path);
    strategy_->load_checkpoint(*module_, opt_config_.optimizer.get(), *reader);
  } catch (const std::exception& e) {
    error = e.what();
  }
  detail::agree_or_throw(*strategy_, error, "restoring checkpoint '" + path + "'");
  const CheckpointReader& ck = *reader;
  const YAML::Node& meta = ck.meta();
  if (opt_config_.optimizer && ck.names(kOptimizerSection).empty())
    spdlog::warn("Checkpoint {} has no optimizer state (saved with weights_only?): the optimizer starts fresh", path);
  current_epoch_ = ck.epoch();
  global_step_ = ck.global_step();
  batch_in_epoch_ = meta["loops"] && meta["loops"]["batch_in_epoch"] ? meta["loops"]["batch_in_epoch"].as<int64_t>() : 0;
  if (opt_config_.lr_scheduler && meta["lr_schedulers"])
    opt_config_.lr_scheduler->set_last_epoch(meta["lr_schedulers"]["last_epoch"].as<int64_t>());
  if (strategy_->grad_scaler() && meta["grad_scaler"]) strategy_->grad_scaler()->load_state_dict(meta["grad_scaler"]);
  if (meta["callbacks"])
    for (auto& c : callbacks_)
      if (meta["callbacks"][c->state_key()]) c->load_state_dict(meta["callbacks"][c->state_key()]);
  // This rank's random generators, as they were when the checkpoint was written.
  const std::string prefix = "rank" + std::to_string(strategy_->global_rank()) + ".";
  std::map<std::string, torch::Tensor> rng;
  for (const auto& n : ck.names(kRngSection))
    if (n.rfind(prefix, 0) == 0) rng[n.substr(prefix.size())] = ck.read(kRngSection, n);
  if (rng.empty() && !ck.names(kRngSection).empty())
    spdlog::warn("Checkpoint {} has no RNG state for rank {} (saved with {} ranks): its generators are not restored",
                 path, strategy_->global_rank(), ck.world_size());
  restore_rng_states(rng, strategy_->root_device());
  CheckpointMeta cm{meta["extra"] ? YAML::Clone(meta["extra"]) : YAML::Node(YAML::NodeType::Map)};
  module_->on_load_checkpoint(cm);
  call_callbacks([&](Callback& c) { c.on_load_checkpoint(*this, *module_, cm); });
}

void Trainer::save_checkpoint(const std::string& path, bool weights_only) {
  VOLT_CHECK(module_ != nullptr, CheckpointError, "save_checkpoint('", path, "') called with no module attached");
  Checkpoint ck;
  ck.epoch = current_epoch_;
  ck.global_step = global_step_;
  ck.meta["volt_version"] = VOLT_VERSION;
  ck.meta["torch_version"] = TORCH_VERSION;
  ck.meta["format_version"] = kCheckpointFormatVersion;
  ck.meta["state_dict_type"] = strategy_->checkpoint_format();
  ck.meta["weights_only"] = weights_only;
  ck.meta["precision"] = strategy_->precision().name();
  ck.meta["strategy"] = strategy_->name();
  ck.meta["world_size"] = strategy_->world_size();
  ck.meta["hyper_parameters"] = module_->hparams();
  if (config_ && !config_.IsNull()) ck.meta["config"] = config_;
  ck.meta["loops"]["batch_in_epoch"] = batch_in_epoch_;
  ck.meta["loops"]["epoch"] = current_epoch_;
  ck.meta["loops"]["global_step"] = global_step_;
  if (opt_config_.lr_scheduler) {
    ck.meta["lr_schedulers"]["name"] = opt_config_.lr_scheduler->name();
    ck.meta["lr_schedulers"]["last_epoch"] = opt_config_.lr_scheduler->last_epoch();
  }
  if (!weights_only) {
    for (auto& c : callbacks_) ck.meta["callbacks"][c->state_key()] = c->state_dict();
    if (strategy_->grad_scaler()) ck.meta["grad_scaler"] = strategy_->grad_scaler()->state_dict();
    ck.rng_states = capture_rng_states(strategy_->root_device());
  }
  CheckpointMeta cm{YAML::Node(YAML::NodeType::Map)};
  module_->on_save_checkpoint(cm);
  call_callbacks([&](Callback& c) { c.on_save_checkpoint(*this, *module_, cm); });
  ck.meta["extra"] = cm.extra;
  strategy_->save_checkpoint(*module_, weights_only ? nullptr : opt_config_.optimizer.get(), ck, path);
}

// ---------------------------------------------------------------------------------------------
// metrics

void Trainer::log_metric(const std::string& name, const torch::Tensor& value, const LogOptions& o) {
  VOLT_CHECK(value.numel() == 1, ConfigError, "log('", name, "'): value must be a scalar, got shape ", value.sizes());
  if (stage_ == Stage::Sanity) return;
  torch::Tensor v = value.detach().to(torch::kCPU, torch::kDouble);
  if (o.sync_dist) v = strategy_->all_reduce(v, ReduceOp::Mean);
  const double x = v.item<double>();
  const bool train = stage_ == Stage::Train;
  const bool on_step = o.on_step.value_or(train);
  const bool on_epoch = o.on_epoch.value_or(!train);
  const std::string step_name = (on_step && on_epoch) ? name + "_step" : name;
  const std::string epoch_name = (on_step && on_epoch) ? name + "_epoch" : name;
  if (on_step) {
    if (o.logger) step_metrics_[step_name] = x;
    callback_metrics_[step_name] = x;
    if (on_epoch) callback_metrics_[name] = x;
    if (o.prog_bar) progress_bar_metrics_[step_name == name ? name : name] = x;
  }
  if (on_epoch) {
    auto& acc = (train ? train_epoch_accum_ : eval_epoch_accum_)[epoch_name];
    acc.first += x;
    acc.second += 1;
    if (o.prog_bar && !on_step) progress_bar_metrics_[name] = x;
  }
}

void Trainer::flush_step_metrics() {
  if (step_metrics_.empty()) return;
  if (logger_) {
    auto row = step_metrics_;
    row["epoch"] = static_cast<double>(current_epoch_);
    logger_->log_metrics(row, global_step_ - 1);
  }
  step_metrics_.clear();
}

std::map<std::string, double> Trainer::publish_epoch_metrics(const EpochAccum& accum) {
  std::map<std::string, double> out;
  for (const auto& [k, acc] : accum) {
    if (acc.second == 0) continue;
    out[k] = acc.first / static_cast<double>(acc.second);
  }
  for (auto& [k, v] : out) {
    callback_metrics_[k] = v;
    // "loss_epoch" is also reachable as "loss" for monitors, as in Lightning.
    const std::string suffix = "_epoch";
    if (k.size() > suffix.size() && k.compare(k.size() - suffix.size(), suffix.size(), suffix) == 0)
      callback_metrics_[k.substr(0, k.size() - suffix.size())] = v;
  }
  return out;
}

std::map<std::string, double> Trainer::finish_epoch_metrics(EpochAccum& accum) {
  auto out = publish_epoch_metrics(accum);
  accum.clear();
  if (logger_ && !out.empty()) {
    auto row = out;
    row["epoch"] = static_cast<double>(current_epoch_);
    logger_->log_metrics(row, std::max<int64_t>(global_step_ - 1, 0));
    logger_->flush();
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// loops

bool Trainer::done() const {
  if (should_stop) return true;
  if (options_.max_steps >= 0 && global_step_ >= options_.max_steps) return true;
  return false;
}

void Trainer::run_eval(DataLoader& loader, Stage stage, int64_t max_batches) {
  const Stage saved = stage_;
  stage_ = stage;
  const bool was_training = module_->is_training();
  module_->eval();
  torch::NoGradGuard ng;
  const bool is_val = stage != Stage::Test;
  {  // hooks run during the sanity check too (trainer.sanity_checking() tells), as in Lightning
    if (is_val) {
      module_->on_validation_epoch_start();
      call_callbacks([&](Callback& c) { c.on_validation_start(*this, *module_); });
      call_callbacks([&](Callback& c) { c.on_validation_epoch_start(*this, *module_); });
    }
  }
  for (int64_t i = 0; i < max_batches; ++i) {
    Batch b = loader.batch(i);
    try {
      if (is_val)
        strategy_->validation_step(*module_, b, i);
      else
        strategy_->test_step(*module_, b, i);
    } catch (const detail::HookNotImplemented& e) {
      throw ConfigError(std::string("a ") + (is_val ? "validation" : "test") + " dataloader was given but the module does not implement " + e.hook);
    }
    if (is_val) call_callbacks([&](Callback& c) { c.on_validation_batch_end(*this, *module_, b, i); });
  }
  {
    if (stage == Stage::Sanity)
      eval_epoch_accum_.clear();  // sanity-check metrics are never logged
    else
      finish_epoch_metrics(eval_epoch_accum_);
    if (is_val) {
      module_->on_validation_epoch_end();
      call_callbacks([&](Callback& c) { c.on_validation_epoch_end(*this, *module_); });
      call_callbacks([&](Callback& c) { c.on_validation_end(*this, *module_); });
    } else {
      module_->on_test_epoch_end();
      call_callbacks([&](Callback& c) { c.on_test_epoch_end(*this, *module_); });
    }
  }
  if (was_training) module_->train();
  stage_ = saved;
}

void Trainer::optimizer_step_and_schedule() {
  auto& opt = *opt_config_.optimizer;
  GradScaler* scaler = strategy_->grad_scaler();
  if (scaler) scaler->unscale(opt);  // hooks and clipping see true gradients, as in Lightning
  module_->on_before_optimizer_step(opt);
  call_callbacks([&](Callback& c) { c.on_before_optimizer_step(*this, *module_, opt); });
  if (options_.gradient_clip_val && *options_.gradient_clip_val > 0)
    strategy_->clip_gradients(opt, *options_.gradient_clip_val, options_.gradient_clip_algorithm);
  if (scaler) {
    if (!scaler->step(opt, [&] { strategy_->optimizer_step(opt); }))
      spdlog::debug("step {}: inf/nan gradients, optimizer step skipped; loss scale now {}", global_step_, scaler->scale());
  } else {
    strategy_->optimizer_step(opt);
  }
  strategy_->zero_grad(opt);
  ++global_step_;
  if (opt_config_.lr_scheduler && opt_config_.interval == "step" && global_step_ % opt_config_.frequency == 0)
    opt_config_.lr_scheduler->step();
}

void Trainer::train_epoch(DataLoader& train_loader, DataLoader* val_loader, int64_t start_batch) {
  train_loader.set_epoch(current_epoch_);
  const int64_t n = num_training_batches_;
  const int64_t accum = options_.accumulate_grad_batches;
  int64_t val_every = 0;
  if (val_loader && (current_epoch_ + 1) % options_.check_val_every_n_epoch == 0) {
    val_every = options_.val_check_interval.is_fraction
                    ? std::max<int64_t>(1, static_cast<int64_t>(options_.val_check_interval.value * n))
                    : static_cast<int64_t>(options_.val_check_interval.value);
  }
  const int64_t val_batches = val_loader ? options_.limit_val_batches.apply(val_loader->num_batches()) : 0;
  module_->train();
  train_epoch_accum_.clear();
  module_->on_train_epoch_start();
  call_callbacks([&](Callback& c) { c.on_train_epoch_start(*this, *module_); });
  for (int64_t i = start_batch; i < n && !done(); ++i) {
    Batch b = train_loader.batch(i);
    module_->on_train_batch_start(b, i);
    call_callbacks([&](Callback& c) { c.on_train_batch_start(*this, *module_, b, i); });
    const bool last_micro = ((i + 1) % accum == 0) || (i + 1 == n);
    torch::Tensor loss = strategy_->training_step(*module_, b, i);
    VOLT_CHECK(loss.defined() && loss.numel() == 1, ConfigError, "training_step must return a scalar loss");
    torch::Tensor scaled = accum > 1 ? loss / static_cast<double>(accum) : loss;
    module_->on_before_backward(scaled);
    call_callbacks([&](Callback& c) { c.on_before_backward(*this, *module_, scaled); });
    strategy_->backward(*module_, strategy_->grad_scaler() ? strategy_->grad_scaler()->scale_loss(scaled) : scaled,
                        last_micro);
    module_->on_after_backward();
    call_callbacks([&](Callback& c) { c.on_after_backward(*this, *module_); });
    if (last_micro) optimizer_step_and_schedule();
    // Epoch-interval schedulers step right after the epoch's last optimizer step, as Lightning 2.x
    // does, so checkpoints written by epoch-end hooks already hold the stepped scheduler.
    if (i + 1 == n && opt_config_.lr_scheduler && opt_config_.interval == "epoch" &&
        (current_epoch_ + 1) % opt_config_.frequency == 0)
      opt_config_.lr_scheduler->step();
    batch_in_epoch_ = i + 1;
    if (last_micro && global_step_ % options_.log_every_n_steps == 0) flush_step_metrics();
    const torch::Tensor loss_d = loss.detach();
    module_->on_train_batch_end(loss_d, b, i);
    call_callbacks([&](Callback& c) { c.on_train_batch_end(*this, *module_, loss_d, b, i); });
    if (val_every > 0 && (i + 1) % val_every == 0 && val_batches > 0) run_eval(*val_loader, Stage::Validate, val_batches);
  }
  // Also when max_steps or should_stop ended the epoch early: Lightning's fit loop still runs
  // on_train_epoch_end and logs the epoch-level training metrics of the batches that ran.
  end_train_epoch();
}

void Trainer::end_train_epoch() {
  flush_step_metrics();
  // The epoch means are in callback_metrics while the hooks run (a monitor on "loss_epoch" sees
  // this epoch's value); what the hooks log with on_epoch joins the same row, logged after them.
  publish_epoch_metrics(train_epoch_accum_);
  module_->on_train_epoch_end();
  call_callbacks([&](Callback& c) { c.on_train_epoch_end(*this, *module_); });
  finish_epoch_metrics(train_epoch_accum_);
}

void Trainer::fit(LightningModule& module, DataLoader& train_loader, DataLoader* val_loader,
                  const std::string& ckpt_path) {
  try {
    setup(module, "fit");
    train_epoch_accum_.clear();
    eval_epoch_accum_.clear();
    strategy_->setup_dataloader(train_loader);
    if (val_loader) strategy_->setup_dataloader(*val_loader);
    val_loader_ = val_loader;
    if (!ckpt_path.empty()) restore(ckpt_path);
    num_training_batches_ = options_.limit_train_batches.apply(train_loader.num_batches());
    VOLT_CHECK(num_training_batches_ > 0, ConfigError, "the training dataloader yields no batches on rank ",
               strategy_->global_rank(), " (dataset size ", train_loader.dataset().size(), ", batch_size ",
               train_loader.options().batch_size, ", limit_train_batches)");
    module.on_fit_start();
    call_callbacks([&](Callback& c) { c.on_fit_start(*this, module); });
    if (val_loader && options_.num_sanity_val_steps != 0 && ckpt_path.empty()) {
      const int64_t avail = options_.limit_val_batches.apply(val_loader->num_batches());
      const int64_t n = options_.num_sanity_val_steps < 0 ? avail : std::min(avail, options_.num_sanity_val_steps);
      run_eval(*val_loader, Stage::Sanity, n);
    }
    stage_ = Stage::Train;
    module.on_train_start();
    call_callbacks([&](Callback& c) { c.on_train_start(*this, module); });
    // A checkpoint saved at the end of an epoch resumes at the next one.
    if (batch_in_epoch_ >= num_training_batches_) {
      ++current_epoch_;
      batch_in_epoch_ = 0;
    }
    const int64_t max_epochs = options_.effective_max_epochs();
    while (current_epoch_ < max_epochs && !done()) {
      const int64_t start = batch_in_epoch_;
      train_epoch(train_loader, val_loader, start);
      if (batch_in_epoch_ < num_training_batches_) break;  // stopped mid-epoch (max_steps / should_stop)
      if (done()) break;
      ++current_epoch_;
      batch_in_epoch_ = 0;
    }
    stage_ = Stage::Train;
    module.on_train_end();
    call_callbacks([&](Callback& c) { c.on_train_end(*this, module); });
    module.on_fit_end();
    call_callbacks([&](Callback& c) { c.on_fit_end(*this, module); });
    finish(module, "fit");
  } catch (const std::exception& e) {
    call_callbacks([&](Callback& c) { c.on_exception(*this, module, e); });
    if (logger_) logger_->flush();
    stage_ = Stage::None;
    throw;
  }
}

std::map<std::string, double> Trainer::validate(LightningModule& module, DataLoader& loader, const std::string& ckpt_path) {
  setup(module, "validate");
  strategy_->setup_dataloader(loader);
  if (!ckpt_path.empty()) restore(ckpt_path);
  eval_epoch_accum_.clear();
  run_eval(loader, Stage::Validate, options_.limit_val_batches.apply(loader.num_batches()));
  finish(module, "validate");
  return callback_metrics_;
}

std::map<std::string, double> Trainer::test(LightningModule& module, DataLoader& loader, const std::string& ckpt_path) {
  setup(module, "test");
  strategy_->setup_dataloader(loader);
  if (!ckpt_path.empty()) restore(ckpt_path);
  eval_epoch_accum_.clear();
  run_eval(loader, Stage::Test, options_.limit_test_batches.apply(loader.num_batches()));
  finish(module, "test");
  return callback_metrics_;
}

}  // namespace volt
