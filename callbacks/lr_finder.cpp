#include "volt/callbacks/lr_finder.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <random>

#include "volt/callbacks/plot_image.h"
#include "volt/core/files.h"
#include "volt/core/signals.h"
#include "volt/trainer/trainer.h"

namespace volt {

namespace {
constexpr double kBeta = 0.98;

void set_lr(torch::optim::Optimizer& opt, double lr) {
  for (auto& g : opt.param_groups()) g.options().set_lr(lr);
}

/// The training batches of an epoch (limit_train_batches), then from the epoch's start again.
struct Batches {
  DataLoader& loader;
  int64_t per_epoch;  // DataLoader::kUnknownLength: until the loader ends
  std::optional<BatchStream> stream;
  int64_t taken = 0;
  /// nullopt when the loader has no batch at all.
  std::optional<Batch> next() {
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (stream && (per_epoch == DataLoader::kUnknownLength || taken < per_epoch))
        if (auto b = stream->next()) {
          ++taken;
          return b;
        }
      stream.emplace(loader.iterate(0));
      taken = 0;
    }
    return std::nullopt;
  }
};
}  // namespace

void LearningRateFinderOptions::validate(const std::string& prefix) const {
  VOLT_CHECK(mode == "exponential" || mode == "linear", ConfigError, "config key '", prefix,
             ".mode': expected 'exponential' or 'linear', got '", mode, "'");
  VOLT_CHECK(min_lr > 0 && std::isfinite(min_lr), ConfigError, "config key '", prefix, ".min_lr': must be > 0, got ",
             min_lr);
  VOLT_CHECK(max_lr > min_lr && std::isfinite(max_lr), ConfigError, "config key '", prefix,
             ".max_lr': must be > min_lr (", min_lr, "), got ", max_lr);
  VOLT_CHECK(num_training_steps >= 1, ConfigError, "config key '", prefix, ".num_training_steps': must be >= 1, got ",
             num_training_steps);
  VOLT_CHECK(!early_stop_threshold || *early_stop_threshold > 0, ConfigError, "config key '", prefix,
             ".early_stop_threshold': must be > 0 (or null: no early stop), got ", early_stop_threshold.value_or(0));
}

LearningRateFinder::LearningRateFinder(Options options) : options_(std::move(options)) {
  std::transform(options_.mode.begin(), options_.mode.end(), options_.mode.begin(), ::tolower);
  options_.validate();
}

double LearningRateFinder::lr_at(int64_t step) const {
  // The scheduler's first lr is min_lr; step k >= 1 is at r = (k + 1) / num_training_steps.
  if (step <= 0) return options_.min_lr;
  const double r = static_cast<double>(step + 1) / static_cast<double>(options_.num_training_steps);
  if (options_.mode == "linear") return options_.min_lr + r * (options_.max_lr - options_.min_lr);
  return options_.min_lr * std::pow(options_.max_lr / options_.min_lr, r);
}

std::optional<int64_t> LearningRateFinder::optimal_index(int64_t skip_begin, int64_t skip_end) const {
  const int64_t n = static_cast<int64_t>(losses_.size());
  std::vector<double> l, x;
  std::vector<int64_t> idx;
  for (int64_t i = skip_begin; i < n - skip_end; ++i)
    if (std::isfinite(losses_[i])) {
      l.push_back(losses_[i]);
      x.push_back(lrs_[i]);
      idx.push_back(i);
    }
  if (l.size() < 2) return std::nullopt;
  const auto opts = torch::TensorOptions().dtype(torch::kDouble);
  const torch::Tensor losses = torch::tensor(l, opts), lrs = torch::tensor(x, opts);
  const torch::Tensor grad = torch::gradient(losses, torch::TensorList{lrs}, c10::optional<int64_t>(0), 1)[0];
  return idx[grad.argmin().item<int64_t>()];
}

std::optional<double> LearningRateFinder::suggestion(int64_t skip_begin, int64_t skip_end) const {
  const auto i = optimal_index(skip_begin, skip_end);
  if (!i) return std::nullopt;
  return lrs_[*i];
}

void LearningRateFinder::on_fit_start(Trainer& trainer, LightningModule& module) {
  if (trainer.fast_dev_run()) {
    spdlog::warn("Skipping learning rate finder since fast_dev_run is enabled.");
    return;
  }
  VOLT_CHECK(module.automatic_optimization, ConfigError,
             "LearningRateFinder: the module uses manual optimization; the finder steps the optimizer itself and "
             "needs automatic optimization");
  VOLT_CHECK(trainer.optimizers().size() == 1, ConfigError, "LearningRateFinder: configure_optimizers returned ",
             trainer.optimizers().size(), " optimizers; the learning rate finder works with a single optimizer");
  VOLT_CHECK(trainer.train_dataloader() != nullptr, ConfigError, "LearningRateFinder: no training loader");
  if (options_.update_attr && !options_.attr_name.empty())
    VOLT_CHECK(static_cast<const YAML::Node>(module.hparams())[options_.attr_name], ConfigError,
               "LearningRateFinder: attr_name '", options_.attr_name, "' is not a key of the module's hparams()");
  // Every rank must name the same temporary file: rank 0 draws it.
  std::random_device rd;
  const int64_t token = trainer.strategy()
                            .broadcast(torch::tensor({static_cast<int64_t>(rd() & 0x7FFFFFFF)}, torch::kLong), 0)
                            .item<int64_t>();
  const std::string ckpt = detail::str_cat(trainer.options().default_root_dir, "/.lr_find_", token, ".ckpt");
  trainer.save_checkpoint(ckpt);
  const bool was_training = module.is_training();
  std::vector<double> initial_lrs;
  for (const auto& g : trainer.optimizers()[0].optimizer->param_groups()) initial_lrs.push_back(g.options().get_lr());
  try {
    search(trainer, module);
  } catch (...) {
    if (trainer.is_global_zero()) detail::remove_tree(ckpt);
    throw;
  }
  if (!was_training) module.eval();
  // The checkpoint holds them too; set back first, the restore has no changed lr to warn about.
  auto& groups = trainer.optimizers()[0].optimizer->param_groups();
  for (size_t i = 0; i < groups.size() && i < initial_lrs.size(); ++i) groups[i].options().set_lr(initial_lrs[i]);
  trainer.restore_checkpoint_in_fit(ckpt);
  trainer.strategy().barrier("lr_find");
  if (trainer.is_global_zero()) detail::remove_tree(ckpt);
  if (interrupted_) {
    // A search cut short says little; the restored learning rates stand.
    if (trainer.is_global_zero())
      spdlog::warn("LearningRateFinder: stopped by a signal after {} of {} steps; no learning rate is suggested",
                   lrs_.size(), options_.num_training_steps);
    lrs_.clear();
    losses_.clear();
    optimal_lr_.reset();
    return;
  }
  if (static_cast<int64_t>(lrs_.size()) != options_.num_training_steps)
    spdlog::info("LR finder stopped early after {} steps due to diverging loss.", lrs_.size());
  optimal_lr_.reset();
  const auto lr = suggestion();
  if (!lr)
    spdlog::error(
        "Failed to compute suggestion for learning rate because there are not enough points. Increase the loop "
        "iteration limits or the size of your dataset/dataloader.");
  if (options_.update_attr && lr) apply(trainer, module, *lr);
  if (trainer.is_global_zero()) {
    const std::string dir = trainer.log_dir().empty() ? trainer.options().default_root_dir : trainer.log_dir();
    plot_path_ = dir + "/lr_find.png";
    try {
      plot(plot_path_);
    } catch (const std::exception& e) {  // the search's result stands without its picture
      spdlog::warn("LearningRateFinder: {}", e.what());
      plot_path_.clear();
    }
  }
}

void LearningRateFinder::search(Trainer& trainer, LightningModule& module) {
  lrs_.clear();
  losses_.clear();
  Strategy& strategy = trainer.strategy();
  torch::optim::Optimizer& opt = *trainer.optimizers()[0].optimizer;
  DataLoader& loader = *trainer.train_dataloader();
  const int64_t accum = std::max<int64_t>(1, trainer.accumulate_grad_batches);
  const auto& clip = trainer.options().gradient_clip_val;
  const int64_t start_step = trainer.global_step();
  Batches batches{loader, trainer.num_training_batches()};
  module.train();
  double avg = 0, best = 0;
  interrupted_ = false;
  for (int64_t k = 0; k < options_.num_training_steps; ++k) {
    // A stop signal ends the search (all ranks agree); fit then stops at its first step.
    if (strategy.reduce_boolean_decision(detail::StopSignals::requested() != 0, /*all=*/false)) {
      interrupted_ = true;
      break;
    }
    const double lr = lr_at(k);
    set_lr(opt, lr);
    torch::Tensor loss;
    for (int64_t m = 0; m < accum; ++m) {
      std::optional<Batch> batch = batches.next();
      VOLT_CHECK(strategy.reduce_boolean_decision(batch.has_value()), ConfigError,
                 "LearningRateFinder: the training loader yields no batch on some rank");
      loss = strategy.training_step(module, *batch, m);
      VOLT_CHECK(loss.defined() && loss.numel() == 1, ConfigError, "training_step must return a scalar loss");
      strategy.backward(module, accum > 1 ? loss / static_cast<double>(accum) : loss, m + 1 == accum);
    }
    strategy.optimizer_step(opt, [&] {
      if (clip && *clip > 0) strategy.clip_gradients(opt, *clip, trainer.options().gradient_clip_algorithm.value());
    });
    strategy.zero_grad(opt);
    // Rank 0's loss decides on every rank (Lightning broadcasts rank 0's results).
    const double current =
        strategy.broadcast(loss.detach().to(torch::kCPU, torch::kDouble).reshape({1}), 0).item<double>();
    const int64_t step = start_step + k + 1;  // Lightning's trainer.global_step after this step
    avg = kBeta * avg + (1 - kBeta) * current;
    const double smoothed = avg / (1 - std::pow(kBeta, static_cast<double>(step + 1)));
    const bool diverged = options_.early_stop_threshold && step > 1 && smoothed > *options_.early_stop_threshold * best;
    if (smoothed < best || step == 1) best = smoothed;
    lrs_.push_back(lr);
    losses_.push_back(smoothed);
    if (diverged || !std::isfinite(smoothed)) break;
  }
}

void LearningRateFinder::apply(Trainer& trainer, LightningModule& module, double lr) {
  for (const auto& c : trainer.optimizers().configs) {
    set_lr(*c.optimizer, lr);
    if (c.lr_scheduler && trainer.is_global_zero())
      spdlog::warn(
          "LearningRateFinder: the optimizer's LR scheduler keeps its own base lr; its next step replaces the "
          "suggested lr {}",
          lr);
  }
  if (!options_.attr_name.empty()) {
    YAML::Node hp = module.hparams();
    hp[options_.attr_name] = lr;
  }
  optimal_lr_ = lr;
  if (trainer.is_global_zero()) spdlog::info("Learning rate set to {}", lr);
}

void LearningRateFinder::plot(const std::string& path) const {
  constexpr int kW = 640, kH = 480, kLeft = 60, kRight = 20, kTop = 20, kBottom = 50;
  PlotImage img(kW, kH);
  const Rgb black{0, 0, 0}, grey{200, 200, 200}, blue{31, 119, 180}, red{214, 39, 40};
  const bool log_x = options_.mode == "exponential";
  auto xv = [&](double lr) { return log_x ? std::log10(lr) : lr; };
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (size_t i = 0; i < lrs_.size(); ++i) {
    x0 = std::min(x0, xv(lrs_[i]));
    x1 = std::max(x1, xv(lrs_[i]));
    if (!std::isfinite(losses_[i])) continue;
    y0 = std::min(y0, losses_[i]);
    y1 = std::max(y1, losses_[i]);
  }
  if (!(x1 > x0)) x1 = x0 + 1;
  if (!std::isfinite(y0)) y0 = 0, y1 = 1;
  if (!(y1 > y0)) y1 = y0 + 1;
  const double pad = (y1 - y0) * 0.05;
  y0 -= pad;
  y1 += pad;
  auto px = [&](double lr) { return kLeft + (xv(lr) - x0) / (x1 - x0) * (kW - kLeft - kRight); };
  auto py = [&](double loss) { return kH - kBottom - (loss - y0) / (y1 - y0) * (kH - kTop - kBottom); };
  if (log_x)  // a grid line and a tick at each power of ten
    for (double d = std::ceil(x0); d <= x1; d += 1) {
      const double x = px(std::pow(10.0, d));
      img.line(x, kTop, x, kH - kBottom, grey);
      img.line(x, kH - kBottom, x, kH - kBottom + 6, black);
    }
  img.rect(kLeft, kTop, kW - kRight, kH - kBottom, black);
  for (size_t i = 1; i < lrs_.size(); ++i)
    if (std::isfinite(losses_[i - 1]) && std::isfinite(losses_[i]))
      img.line(px(lrs_[i - 1]), py(losses_[i - 1]), px(lrs_[i]), py(losses_[i]), blue, 2.0);
  if (const auto i = optimal_index()) img.disc(px(lrs_[*i]), py(losses_[*i]), 6.0, red);
  img.write_png(path);
}

}  // namespace volt
