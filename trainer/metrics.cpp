// Metrics: logging, epoch accumulation and publishing of the values LightningModule::log receives.
#include "volt/trainer/metrics.h"

#include <algorithm>

#include "volt/core/errors.h"

namespace volt {

void Metrics::log(const std::string& given, const torch::Tensor& value, const LogOptions& o, RunningStage stage) {
  VOLT_CHECK(stage != RunningStage::Predict, ConfigError, "log('", given,
             "') called in predict: predict_step returns its outputs instead of logging them (as in Lightning)");
  VOLT_CHECK(value.numel() == 1, ConfigError, "log('", given, "'): value must be a scalar, got shape ", value.sizes());
  if (stage == RunningStage::Sanity) return;
  const bool several = stage != RunningStage::Train && num_dataloaders_ > 1;
  const std::string name = several ? given + "/dataloader_idx_" + std::to_string(dataloader_idx_) : given;
  torch::Tensor v = value.detach().to(torch::kCPU, torch::kDouble);
  if (o.sync_dist) v = strategy_.all_reduce(v, ReduceOp::Mean);
  const double x = v.item<double>();
  const bool train = stage == RunningStage::Train;
  const bool on_step = o.on_step.value_or(train);
  const bool on_epoch = o.on_epoch.value_or(!train);
  const std::string step_name = (on_step && on_epoch) ? name + "_step" : name;
  const std::string epoch_name = (on_step && on_epoch) ? name + "_epoch" : name;
  if (on_step) {
    if (o.logger) step_metrics_[step_name] = x;
    callback_metrics_[step_name] = x;
    if (on_epoch) callback_metrics_[name] = x;
    if (o.prog_bar) progress_bar_metrics_[name] = x;
  }
  if (on_epoch) {
    auto& acc = accum(train ? Loop::Train : Loop::Eval)[epoch_name];
    acc.first += x;
    acc.second += 1;
    if (o.prog_bar && !on_step) progress_bar_metrics_[name] = x;
  }
}

void Metrics::flush_step_metrics(const FitProgress& progress) {
  if (step_metrics_.empty()) return;
  if (logger_) {
    auto row = step_metrics_;
    row["epoch"] = static_cast<double>(progress.epoch);
    logger_->log_metrics(row, progress.global_step - 1);
  }
  step_metrics_.clear();
}

std::map<std::string, double> Metrics::publish_epoch(Loop loop) {
  std::map<std::string, double> out;
  for (const auto& [k, acc] : accum(loop)) {
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

std::map<std::string, double> Metrics::finish_epoch(Loop loop, const FitProgress& progress) {
  auto out = publish_epoch(loop);
  reset_epoch(loop);
  if (logger_ && !out.empty()) {
    auto row = out;
    row["epoch"] = static_cast<double>(progress.epoch);
    logger_->log_metrics(row, std::max<int64_t>(progress.global_step - 1, 0));
    logger_->flush();
  }
  return out;
}

}  // namespace volt
