#include "volt/callbacks/backbone_finetuning.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <cmath>

#include "volt/module/lightning_module.h"

namespace volt {

void BackboneFinetuningOptions::validate(const std::string& prefix) const {
  VOLT_CHECK(unfreeze_backbone_at_epoch >= 0, ConfigError, "config key '", prefix,
             ".unfreeze_backbone_at_epoch': must be >= 0, got ", unfreeze_backbone_at_epoch);
  VOLT_CHECK(backbone_initial_ratio_lr > 0, ConfigError, "config key '", prefix,
             ".backbone_initial_ratio_lr': must be > 0, got ", backbone_initial_ratio_lr);
  VOLT_CHECK(!backbone_initial_lr || *backbone_initial_lr > 0, ConfigError, "config key '", prefix,
             ".backbone_initial_lr': must be > 0 (or null: the first group's lr x backbone_initial_ratio_lr), got ",
             backbone_initial_lr.value_or(0));
  VOLT_CHECK(initial_denom_lr > 0, ConfigError, "config key '", prefix, ".initial_denom_lr': must be > 0, got ",
             initial_denom_lr);
  VOLT_CHECK(rounding >= 0, ConfigError, "config key '", prefix, ".rounding': must be >= 0, got ", rounding);
}

BackboneFinetuning::BackboneFinetuning(Options options, LambdaFunc lambda_func)
    : options_(std::move(options)), lambda_func_(std::move(lambda_func)) {
  options_.validate();
  VOLT_CHECK(lambda_func_ != nullptr, ConfigError, "BackboneFinetuning: lambda_func is empty");
}

std::shared_ptr<torch::nn::Module> BackboneFinetuning::backbone(LightningModule& module) {
  for (const auto& kv : module.named_children())
    if (kv.key() == "backbone") return kv.value();
  throw ConfigError(
      "BackboneFinetuning: the LightningModule has no submodule named 'backbone'; register the part to finetune "
      "as one (register_module(\"backbone\", ...))");
}

void BackboneFinetuning::freeze_before_training(LightningModule& module) {
  freeze({backbone(module)}, options_.train_bn);
}

void BackboneFinetuning::finetune_function(LightningModule& module, int64_t epoch, torch::optim::Optimizer& optimizer) {
  const double current_lr = optimizer.param_groups()[0].options().get_lr();
  if (epoch == options_.unfreeze_backbone_at_epoch) {
    const double initial = options_.backbone_initial_lr.value_or(current_lr * options_.backbone_initial_ratio_lr);
    previous_backbone_lr_ = initial;
    unfreeze_and_add_param_group({backbone(module)}, optimizer, initial, options_.initial_denom_lr, options_.train_bn);
    report(current_lr, initial);
  } else if (epoch > options_.unfreeze_backbone_at_epoch && previous_backbone_lr_) {
    double next = lambda_func_(epoch + 1) * *previous_backbone_lr_;
    if (options_.should_align && next > current_lr) next = current_lr;
    optimizer.param_groups().back().options().set_lr(next);
    previous_backbone_lr_ = next;
    report(current_lr, next);
  }
}

void BackboneFinetuning::report(double current_lr, double backbone_lr) const {
  if (!options_.verbose) return;
  const double scale = std::pow(10.0, static_cast<double>(options_.rounding));
  auto round = [&](double x) { return std::round(x * scale) / scale; };
  spdlog::info("Current lr: {}, Backbone lr: {}", round(current_lr), round(backbone_lr));
}

YAML::Node BackboneFinetuning::state_dict() const {
  YAML::Node n = BaseFinetuning::state_dict();
  n["previous_backbone_lr"] = previous_backbone_lr_ ? YAML::Node(*previous_backbone_lr_) : YAML::Node();
  return n;
}

void BackboneFinetuning::load_state_dict(const YAML::Node& state) {
  const YAML::Node prev = state["previous_backbone_lr"];
  previous_backbone_lr_ = prev && !prev.IsNull() ? std::optional<double>(prev.as<double>()) : std::nullopt;
  BaseFinetuning::load_state_dict(state);
}

}  // namespace volt
