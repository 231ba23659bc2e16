#pragma once
/// Deferred initialization: the units LightningModule::wrap() shards inside configure_model(),
/// while the model is being built, so that no rank ever holds the whole model (as FSDP2's
/// fully_shard called layer by layer). Each wrapped module the auto_wrap_policy selects is sharded
/// at once: the ranks agree on its values (rank_agreement.h), then its FlatParam keeps only this
/// rank's shard.
///
/// [Note: named at set-up] A wrapped module's place in the model, and so its parameters' names,
/// is known only once configure_model() has returned: at wrap() the policy's predicate sees "" as
/// the name, and the entries hold names relative to the module. build_units (unit_builder.h) asks
/// take_units for them, which names them and checks them against the complete model: a weight tied
/// to a module outside the unit cannot be moved to an enclosing unit any more (it is sharded).
///
/// Ownership: keeps each wrapped module alive (it may be wrapped but never registered) and owns
/// its FlatParam until take_units hands both over. Thread-safety: the training thread.
#include <torch/nn/module.h>

#include <memory>
#include <set>
#include <vector>

#include "volt/strategies/fsdp/rank_agreement.h"
#include "volt/strategies/fsdp/unit_builder.h"

namespace volt::detail {

class DeferredUnits {
 public:
  /// Whether `policy` makes `unit` a unit now (its predicate sees no name yet); a module it does not
  /// select is left to set-up like any module. ConfigError when `unit` was wrapped before.
  bool selects(const torch::nn::Module& unit, const ModulePolicy& policy) const;
  /// Shards `unit` now, after `agreement` on its parameters and buffers; its parameters already in a
  /// wrapped unit inside it stay there. ConfigError when it is not owned by a shared_ptr.
  void shard(torch::nn::Module& unit, const RankAgreement& agreement, const FlatParamSpec& spec);
  /// The parameters wrapped units hold (their storage is gone).
  std::set<c10::TensorImpl*> params() const;
  bool empty() const { return units_.empty(); }
  /// Drops the units (those of a configure_model() that failed before set-up).
  void clear() { units_.clear(); }
  /// The units, named by their paths in the complete `model`; leaves this empty. ConfigError when a
  /// wrapped module is not part of `model` or shares a parameter outside its unit (see the note).
  std::vector<FSDPUnit> take_units(torch::nn::Module& model, const ParamOwners& owners);

 private:
  struct Unit {
    std::shared_ptr<torch::nn::Module> module;
    std::unique_ptr<FlatParam> flat;
  };
  std::vector<Unit> units_;
};

}  // namespace volt::detail
