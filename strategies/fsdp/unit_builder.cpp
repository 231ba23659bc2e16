#include "volt/strategies/fsdp/unit_builder.h"

#include <torch/torch.h>

#include <set>

#include "volt/strategies/fsdp/deferred_wrap.h"
#include "volt/strategies/module_policy.h"

namespace volt::detail {

std::unique_ptr<FlatParam> FlatParamSpec::make(const std::string& unit_name,
                                               std::vector<FlatParamEntry> entries) const {
  return std::make_unique<FlatParam>(unit_name, std::move(entries), shard_rank, shard_size, param_dtype, device,
                                     offload, shard_dtype);
}

ParamOwners::ParamOwners(torch::nn::Module& model) {
  // include_self would need the model to be owned by a shared_ptr (LibTorch's shared_from_this).
  for (const auto& p : model.named_parameters(/*recurse=*/false))
    owners_[p.value().unsafeGetTensorImpl()].push_back("");
  for (const auto& item : model.named_modules("", /*include_self=*/false))
    for (const auto& p : item.value()->named_parameters(/*recurse=*/false))
      owners_[p.value().unsafeGetTensorImpl()].push_back(item.key());
}

std::string ParamOwners::outside(const torch::Tensor& param, const std::string& unit) const {
  auto it = owners_.find(param.unsafeGetTensorImpl());
  if (it == owners_.end() || unit.empty()) return {};
  for (const auto& path : it->second)
    if (path != unit && path.rfind(unit + ".", 0) != 0) return path.empty() ? "<root>" : path;
  return {};
}

std::vector<FSDPUnit> build_units(torch::nn::Module& model, const ModulePolicy& policy, DeferredUnits& deferred,
                                  const FlatParamSpec& spec) {
  std::set<c10::TensorImpl*> claimed = deferred.params();
  const ParamOwners owners(model);
  std::vector<FSDPUnit> wrapped = deferred.take_units(model, owners);
  std::set<const torch::nn::Module*> wrapped_modules;
  for (const auto& u : wrapped) wrapped_modules.insert(u.module);
  // Then the units the policy picks (unless wrap() made them already); inner units claim their
  // parameters first.
  std::vector<std::pair<std::string, torch::nn::Module*>> picked;
  if (!policy.empty())
    for (auto& p : select_modules(model, policy, "trainer.strategy.auto_wrap_policy", "FSDP"))
      if (!wrapped_modules.count(p.second)) picked.push_back(p);
  std::vector<std::vector<FlatParamEntry>> entries(picked.size());
  for (size_t i = picked.size(); i-- > 0;) {
    for (const auto& kv : picked[i].second->named_parameters()) {
      if (!owners.outside(kv.value(), picked[i].first).empty()) continue;  // tied: an enclosing unit's
      if (!claimed.insert(kv.value().unsafeGetTensorImpl()).second) continue;
      entries[i].push_back({picked[i].first + "." + kv.key(), kv.value()});
    }
  }
  std::vector<FlatParamEntry> root;
  for (const auto& kv : model.named_parameters())
    // insert, not count: a shared (tied) parameter listed twice becomes one flat entry.
    if (claimed.insert(kv.value().unsafeGetTensorImpl()).second) root.push_back({kv.key(), kv.value()});
  std::vector<FSDPUnit> units;
  units.emplace_back("", &model, spec.make("<root>", std::move(root)));
  for (auto& u : wrapped) units.push_back(std::move(u));
  for (size_t i = 0; i < picked.size(); ++i)
    units.emplace_back(picked[i].first, picked[i].second, spec.make(picked[i].first, std::move(entries[i])));
  return units;
}

void dissolve_units(std::vector<FSDPUnit>& units, ProcessGroup* shard_group, torch::Device device,
                    at::ScalarType dtype) {
  torch::NoGradGuard ng;
  for (auto& u : units) {
    torch::Tensor full = u.flat->gather_full(shard_group);
    for (auto& e : u.flat->entries()) {
      e.param.mutable_grad() = torch::Tensor();
      e.param.set_data(full.narrow(0, e.offset, e.numel).view(e.shape).to(device, dtype).clone());
    }
  }
}

}  // namespace volt::detail
