#pragma once
/// BaseFinetuning: the base of finetuning callbacks, as Lightning's. A subclass freezes modules in
/// freeze_before_training (called from setup) and unfreezes them in finetune_function (called at
/// each training epoch's start for every optimizer), adding their parameters to the optimizer as a
/// new param group (unfreeze_and_add_param_group).
///
/// The param groups added during fit are the callback's state (Lightning's
/// internal_optimizer_metadata: each group's parameter names and lr), so a fit resumed past an
/// unfreeze rebuilds them, with those parameters trainable, before the optimizer state is loaded.
/// Strategies: single device and DDP (a frozen parameter is skipped by DDP's gradient buckets until it
/// is unfrozen); FSDP is refused (its optimizer holds flat shards, not the module's parameters).
///
/// Configure the optimizers with the trainable parameters only: volt's configure_optimizers runs
/// before the callbacks' setup, so a parameter an optimizer already holds is not added again (a
/// warning says so) and trains with that group's lr.
///
/// Thread-safety: the training thread only (hooks).
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "volt/callbacks/callback.h"

namespace volt {

class BaseFinetuning : public Callback {
 public:
  using Modules = std::vector<std::shared_ptr<torch::nn::Module>>;

  /// Freezes what the fit starts without training (e.g. freeze(backbone)). Called from setup.
  virtual void freeze_before_training(LightningModule& module) = 0;
  /// Unfreezes for `epoch` (e.g. unfreeze_and_add_param_group at some epoch) and may change the
  /// lr of the groups it added. Called at each training epoch's start, once per optimizer.
  virtual void finetune_function(LightningModule& module, int64_t epoch, torch::optim::Optimizer& optimizer) = 0;

  // ---- helpers (Lightning's static methods) ----------------------------------------------------
  /// The leaf modules of `modules` and the modules that hold parameters themselves.
  static Modules flatten_modules(const Modules& modules);
  /// The parameters of `modules` whose requires_grad equals `requires_grad`, BatchNorm's left out
  /// unless `train_bn`.
  static std::vector<torch::Tensor> filter_params(const Modules& modules, bool train_bn = true,
                                                  bool requires_grad = true);
  /// requires_grad on every parameter of `modules`; BatchNorm tracks running statistics again.
  static void make_trainable(const Modules& modules);
  /// requires_grad off for the module's own parameters; a BatchNorm stops tracking running stats.
  static void freeze_module(torch::nn::Module& module);
  /// Freezes `modules`; with `train_bn` their BatchNorm layers stay trainable.
  static void freeze(const Modules& modules, bool train_bn = true);
  /// `params` without the ones `optimizer` already holds (a warning names how many were skipped).
  static std::vector<torch::Tensor> filter_on_optimizer(torch::optim::Optimizer& optimizer,
                                                        const std::vector<torch::Tensor>& params);
  /// Unfreezes `modules` and adds their trainable parameters (not yet in `optimizer`) as a new param
  /// group with `lr`, or without one the first group's lr / initial_denom_lr. The group's other
  /// hyper-parameters are the first group's.
  static void unfreeze_and_add_param_group(const Modules& modules, torch::optim::Optimizer& optimizer,
                                           std::optional<double> lr = std::nullopt, double initial_denom_lr = 10.0,
                                           bool train_bn = true);

  // ---- hooks -----------------------------------------------------------------------------------
  /// freeze_before_training; for fit, ConfigError under FSDP.
  void setup(Trainer& trainer, LightningModule& module, const std::string& stage) override;
  void teardown(Trainer& trainer, LightningModule& module, const std::string& stage) override;
  /// Restores param groups a checkpoint named that could not be restored when it was loaded.
  void on_fit_start(Trainer& trainer, LightningModule& module) override;
  /// finetune_function for each optimizer, then records the groups it added.
  void on_train_epoch_start(Trainer& trainer, LightningModule& module) override;

  /// {internal_optimizer_metadata: [per optimizer: [{params: [names], lr}]]}.
  YAML::Node state_dict() const override;
  /// During a fit's restore (after setup): adds the checkpoint's param groups beyond the ones the
  /// optimizers have, with their parameters trainable, so that the optimizer state loaded next finds
  /// them. CheckpointError when a group names a parameter the module does not have.
  void load_state_dict(const YAML::Node& state) override;

 protected:
  /// Each optimizer's param groups as recorded (parameter names and lr).
  YAML::Node metadata_{YAML::NodeType::Sequence};

 private:
  void store(LightningModule& module, size_t opt_idx, size_t groups_before, torch::optim::Optimizer& optimizer);
  /// Adds metadata_'s groups beyond each optimizer's current ones; false without a running fit.
  bool restore_param_groups();
  Trainer* trainer_ = nullptr;  // between setup and teardown
  bool restarting_ = false;     // a checkpoint's groups wait for the fit (on_fit_start)
};

}  // namespace volt
