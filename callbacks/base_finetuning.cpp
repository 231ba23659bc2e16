#include "volt/callbacks/base_finetuning.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <map>
#include <set>

#include "volt/core/errors.h"
#include "volt/trainer/trainer.h"

namespace volt {

namespace {
torch::nn::BatchNormOptions* batch_norm_options(torch::nn::Module& m) {
  if (auto* b = dynamic_cast<torch::nn::BatchNorm1dImpl*>(&m)) return &b->options;
  if (auto* b = dynamic_cast<torch::nn::BatchNorm2dImpl*>(&m)) return &b->options;
  if (auto* b = dynamic_cast<torch::nn::BatchNorm3dImpl*>(&m)) return &b->options;
  return nullptr;
}

std::set<const c10::TensorImpl*> held_by(const torch::optim::Optimizer& optimizer) {
  std::set<const c10::TensorImpl*> held;
  for (const auto& g : optimizer.param_groups())
    for (const auto& p : g.params()) held.insert(p.unsafeGetTensorImpl());
  return held;
}
}  // namespace

BaseFinetuning::Modules BaseFinetuning::flatten_modules(const Modules& modules) {
  Modules out;
  for (const auto& root : modules)
    for (const auto& m : root->modules(/*include_self=*/true))
      if (m->children().empty() || !m->named_parameters(/*recurse=*/false).is_empty()) out.push_back(m);
  return out;
}

std::vector<torch::Tensor> BaseFinetuning::filter_params(const Modules& modules, bool train_bn, bool requires_grad) {
  std::vector<torch::Tensor> out;
  for (const auto& m : flatten_modules(modules)) {
    if (!train_bn && batch_norm_options(*m)) continue;
    for (const auto& p : m->parameters(/*recurse=*/false))
      if (p.requires_grad() == requires_grad) out.push_back(p);
  }
  return out;
}

void BaseFinetuning::make_trainable(const Modules& modules) {
  for (const auto& m : flatten_modules(modules)) {
    if (auto* bn = batch_norm_options(*m)) bn->track_running_stats(true);
    for (auto& p : m->parameters(/*recurse=*/false)) p.set_requires_grad(true);
  }
}

void BaseFinetuning::freeze_module(torch::nn::Module& module) {
  if (auto* bn = batch_norm_options(module)) bn->track_running_stats(false);
  for (auto& p : module.parameters(/*recurse=*/false)) p.set_requires_grad(false);
}

void BaseFinetuning::freeze(const Modules& modules, bool train_bn) {
  for (const auto& m : flatten_modules(modules)) {
    if (train_bn && batch_norm_options(*m))
      make_trainable({m});
    else
      freeze_module(*m);
  }
}

std::vector<torch::Tensor> BaseFinetuning::filter_on_optimizer(torch::optim::Optimizer& optimizer,
                                                               const std::vector<torch::Tensor>& params) {
  const auto held = held_by(optimizer);
  std::vector<torch::Tensor> out;
  size_t skipped = 0;
  for (const auto& p : params) {
    if (held.count(p.unsafeGetTensorImpl()))
      ++skipped;
    else
      out.push_back(p);
  }
  if (skipped)
    spdlog::warn(
        "{} of the parameters to unfreeze already belong to a param group of this optimizer and are skipped (they "
        "train with that group's lr). Give configure_optimizers only the trainable parameters (requires_grad) if "
        "they should get a group of their own",
        skipped);
  return out;
}

void BaseFinetuning::unfreeze_and_add_param_group(const Modules& modules, torch::optim::Optimizer& optimizer,
                                                  std::optional<double> lr, double initial_denom_lr, bool train_bn) {
  make_trainable(modules);
  VOLT_CHECK(!optimizer.param_groups().empty(), ConfigError, "unfreeze_and_add_param_group: the optimizer has no ",
             "param group to take the hyper-parameters from");
  const double base = lr ? *lr : optimizer.param_groups()[0].options().get_lr();
  const double denom = lr ? 1.0 : initial_denom_lr;
  auto params = filter_on_optimizer(optimizer, filter_params(modules, train_bn, /*requires_grad=*/true));
  if (params.empty()) return;
  auto options = optimizer.param_groups()[0].options().clone();
  options->set_lr(base / denom);
  optimizer.add_param_group(torch::optim::OptimizerParamGroup(std::move(params), std::move(options)));
}

void BaseFinetuning::setup(Trainer& trainer, LightningModule& module, const std::string& stage) {
  if (stage == "fit")
    VOLT_CHECK(trainer.strategy().name() != "fsdp", ConfigError, state_key(),
               " cannot run under strategy 'fsdp': FSDP's optimizer holds flat shards of its units, not the module's "
               "parameters, so the frozen parameters cannot be added as a param group during fit. Use strategy "
               "'ddp' or a single device, or unfreeze by configuring the optimizer again in a new fit");
  trainer_ = &trainer;
  freeze_before_training(module);
}

void BaseFinetuning::teardown(Trainer&, LightningModule&, const std::string&) { trainer_ = nullptr; }

void BaseFinetuning::on_fit_start(Trainer&, LightningModule&) {
  if (restarting_ && !restore_param_groups())
    throw CheckpointError(state_key() + ": the restored param groups could not be added to the optimizers");
  restarting_ = false;
}

void BaseFinetuning::on_train_epoch_start(Trainer& trainer, LightningModule& module) {
  const Optimizers& opts = trainer.optimizers();
  for (size_t i = 0; i < opts.size(); ++i) {
    torch::optim::Optimizer& opt = *opts[i].optimizer;
    const size_t before = opt.param_groups().size();
    finetune_function(module, trainer.current_epoch(), opt);
    store(module, i, before, opt);
  }
}

void BaseFinetuning::store(LightningModule& module, size_t opt_idx, size_t groups_before,
                           torch::optim::Optimizer& optimizer) {
  std::map<const c10::TensorImpl*, std::string> names;
  for (const auto& kv : module.named_parameters()) names.emplace(kv.value().unsafeGetTensorImpl(), kv.key());
  // As Lightning: all groups the first time, afterwards the groups added since.
  const bool first = metadata_.size() <= opt_idx;
  if (first)
    while (metadata_.size() <= opt_idx) metadata_.push_back(YAML::Node(YAML::NodeType::Sequence));
  else if (groups_before == optimizer.param_groups().size())
    return;
  YAML::Node groups = metadata_[opt_idx];
  const auto& current = optimizer.param_groups();
  for (size_t g = first ? 0 : groups_before; g < current.size(); ++g) {
    YAML::Node group(YAML::NodeType::Map);
    YAML::Node params(YAML::NodeType::Sequence);
    for (const auto& p : current[g].params()) {
      auto it = names.find(p.unsafeGetTensorImpl());
      params.push_back(it == names.end() ? std::string() : it->second);
    }
    group["params"] = params;
    group["lr"] = current[g].options().get_lr();
    groups.push_back(group);
  }
}

YAML::Node BaseFinetuning::state_dict() const {
  YAML::Node n(YAML::NodeType::Map);
  n["internal_optimizer_metadata"] = YAML::Clone(metadata_);
  return n;
}

void BaseFinetuning::load_state_dict(const YAML::Node& state) {
  const YAML::Node m = state["internal_optimizer_metadata"];
  metadata_ = m && m.IsSequence() ? YAML::Clone(m) : YAML::Node(YAML::NodeType::Sequence);
  restarting_ = !restore_param_groups();
}

bool BaseFinetuning::restore_param_groups() {
  if (!trainer_ || !trainer_->module() || trainer_->optimizers().empty()) return false;
  LightningModule& module = *trainer_->module();
  std::map<std::string, torch::Tensor> params;
  for (const auto& kv : module.named_parameters()) params.emplace(kv.key(), kv.value());
  const Optimizers& opts = trainer_->optimizers();
  for (size_t i = 0; i < opts.size() && i < metadata_.size(); ++i) {
    torch::optim::Optimizer& opt = *opts[i].optimizer;
    const YAML::Node saved = metadata_[i];
    for (size_t g = opt.param_groups().size(); g < saved.size(); ++g) {
      std::vector<torch::Tensor> group;
      for (const auto& name_node : saved[g]["params"]) {
        const std::string name = name_node.as<std::string>();
        auto it = params.find(name);
        VOLT_CHECK(it != params.end(), CheckpointError, state_key(), ": the checkpoint's param group ", g,
                   " of optimizer ", i, " holds parameter '", name,
                   "', which the module does not have: resume with the same model, or load the weights alone");
        it->second.set_requires_grad(true);
        group.push_back(it->second);
      }
      auto options = opt.param_groups()[0].options().clone();
      options->set_lr(saved[g]["lr"].as<double>());
      opt.add_param_group(torch::optim::OptimizerParamGroup(std::move(group), std::move(options)));
    }
  }
  return true;
}

}  // namespace volt
