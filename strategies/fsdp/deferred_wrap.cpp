#include "volt/strategies/fsdp/deferred_wrap.h"

#include <torch/torch.h>

#include <map>

#include "volt/core/errors.h"
#include "volt/strategies/module_policy.h"

namespace volt::detail {

bool DeferredUnits::selects(const torch::nn::Module& unit, const ModulePolicy& policy) const {
  for (const auto& w : units_)
    VOLT_CHECK(w.module.get() != &unit, ConfigError, "FSDP: wrap() was called twice on the same '", unit.name(),
               "' module");
  // The policy decides which wrapped modules are units (its predicate sees no name yet: the
  // module's place in the model is known only once the model is complete).
  return !policy.empty() && policy_selects(policy, unit, "");
}

void DeferredUnits::shard(torch::nn::Module& unit, const RankAgreement& agreement, const FlatParamSpec& spec) {
  torch::NoGradGuard ng;
  // The unit's own parameters: not those of units wrapped inside it already (sharded, claimed).
  std::set<c10::TensorImpl*> claimed = params();
  std::vector<FlatParamEntry> entries;
  NamedTensors states;
  for (const auto& kv : unit.named_parameters()) {
    if (!claimed.insert(kv.value().unsafeGetTensorImpl()).second) continue;
    entries.push_back({kv.key(), kv.value()});
    states.emplace_back(kv.key(), kv.value());
  }
  for (const auto& kv : unit.named_buffers()) states.emplace_back(kv.key(), kv.value());
  agreement.agree(states);
  std::shared_ptr<torch::nn::Module> owned = unit.weak_from_this().lock();
  VOLT_CHECK(owned != nullptr, ConfigError,
             "FSDP: wrap() needs a module owned by a shared_ptr (a ModuleHolder such as ",
             "volt::hooked(...), or std::make_shared), as register_module does; '", unit.name(), "' is not");
  units_.push_back({std::move(owned), spec.make(unit.name(), std::move(entries))});
}

std::set<c10::TensorImpl*> DeferredUnits::params() const {
  std::set<c10::TensorImpl*> out;
  for (const auto& w : units_)
    for (auto& e : w.flat->entries()) out.insert(e.param.unsafeGetTensorImpl());
  return out;
}

std::vector<FSDPUnit> DeferredUnits::take_units(torch::nn::Module& model, const ParamOwners& owners) {
  std::map<const torch::nn::Module*, std::string> paths;
  for (const auto& item : model.named_modules("", /*include_self=*/false)) paths[item.value().get()] = item.key();
  std::vector<FSDPUnit> out;
  for (auto& w : units_) {
    auto it = paths.find(w.module.get());
    VOLT_CHECK(it != paths.end(), ConfigError, "FSDP: a module given to wrap() ('", w.module->name(),
               "') is not part of the model; register it (register_module, a ModuleList) before configure_model() "
               "returns");
    for (auto& e : w.flat->entries()) {
      const std::string outside = owners.outside(e.param, it->second);
      VOLT_CHECK(outside.empty(), ConfigError, "FSDP: parameter '", it->second, ".", e.name, "' of unit '", it->second,
                 "' is shared with '", outside,
                 "' outside that unit (tied weights), but wrap() sharded the unit before the model was complete. "
                 "Let trainer.strategy.auto_wrap_policy pick this module instead of wrap() (the tied weight then "
                 "goes to the unit of the modules' common ancestor), or keep the modules that share it in one unit");
      e.name = it->second + "." + e.name;
    }
    out.emplace_back(it->second, w.module.get(), std::move(w.flat));
  }
  units_.clear();
  return out;
}

}  // namespace volt::detail
