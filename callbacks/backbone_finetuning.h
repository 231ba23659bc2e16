#pragma once
/// BackboneFinetuning: Lightning's finetuning of the module's `backbone` submodule. The backbone is
/// frozen before training; at epoch `unfreeze_backbone_at_epoch` it is unfrozen and added to each
/// optimizer as a param group with lr backbone_initial_lr, or the first group's lr x
/// backbone_initial_ratio_lr; at every later epoch its lr is multiplied by lambda_func(epoch + 1)
/// and, with should_align, capped at the first group's lr.
///
/// The module must register a submodule named "backbone" (register_module("backbone", ...));
/// ConfigError otherwise. See BaseFinetuning for strategies, resuming and configure_optimizers.
#include <functional>
#include <optional>

#include "volt/callbacks/base_finetuning.h"
#include "volt/core/errors.h"

namespace volt {

/// The constructor's arguments (for configs: `class_path: BackboneFinetuning`); lambda_func is
/// C++ only (BackboneFinetuning's constructor), multiplicative (2.0) by default, as Lightning's.
struct BackboneFinetuningOptions {
  int64_t unfreeze_backbone_at_epoch = 10;
  double backbone_initial_ratio_lr = 0.1;
  std::optional<double> backbone_initial_lr;
  bool should_align = true;
  double initial_denom_lr = 10.0;
  bool train_bn = true;
  bool verbose = false;
  int64_t rounding = 12;

  template <class V>
  void visit(V& v) {
    v("unfreeze_backbone_at_epoch", unfreeze_backbone_at_epoch)("backbone_initial_ratio_lr", backbone_initial_ratio_lr)(
        "backbone_initial_lr", backbone_initial_lr)("should_align", should_align)("initial_denom_lr", initial_denom_lr)(
        "train_bn", train_bn)("verbose", verbose)("rounding", rounding);
  }
  void validate(const std::string& prefix = "BackboneFinetuning") const;
};

class BackboneFinetuning : public BaseFinetuning {
 public:
  using Options = BackboneFinetuningOptions;
  /// The backbone lr's factor at each epoch after the unfreeze (Lightning's lambda_func).
  using LambdaFunc = std::function<double(int64_t epoch)>;
  /// Lightning's default lambda_func: 2.0 at every epoch.
  static double multiplicative(int64_t) { return 2.0; }

  explicit BackboneFinetuning(Options options = {}, LambdaFunc lambda_func = &BackboneFinetuning::multiplicative);
  std::string state_key() const override { return "BackboneFinetuning"; }

  /// freeze(backbone, train_bn).
  void freeze_before_training(LightningModule& module) override;
  void finetune_function(LightningModule& module, int64_t epoch, torch::optim::Optimizer& optimizer) override;

  /// The metadata of BaseFinetuning and previous_backbone_lr.
  YAML::Node state_dict() const override;
  void load_state_dict(const YAML::Node& state) override;

  /// The backbone's lr set at the last epoch start (none before the unfreeze).
  std::optional<double> previous_backbone_lr() const { return previous_backbone_lr_; }
  /// The module's submodule named "backbone"; ConfigError when there is none.
  static std::shared_ptr<torch::nn::Module> backbone(LightningModule& module);

 private:
  void report(double current_lr, double backbone_lr) const;
  Options options_;
  LambdaFunc lambda_func_;
  std::optional<double> previous_backbone_lr_;
};

}  // namespace volt
