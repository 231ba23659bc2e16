#include "volt/strategies/module_policy.h"

#include <set>

#include "volt/core/errors.h"
#include "volt/core/hooked_module.h"

namespace volt {

bool policy_selects(const ModulePolicy& p, const torch::nn::Module& m, const std::string& name) {
  if (p.predicate && p.predicate(m, name)) return true;
  for (const auto& t : p.module_types)
    if (t == m.name()) return true;
  if (p.min_num_params > 0 && is_hooked(m)) {  // size-based picks only modules a strategy can act on
    int64_t n = 0;
    for (const auto& x : m.parameters()) n += x.numel();
    if (n >= p.min_num_params) return true;
  }
  return false;
}

std::vector<std::pair<std::string, torch::nn::Module*>> select_modules(torch::nn::Module& root,
                                                                       const ModulePolicy& policy,
                                                                       const std::string& config_key,
                                                                       const std::string& purpose) {
  std::vector<std::pair<std::string, torch::nn::Module*>> picked;
  if (policy.empty()) return picked;
  std::set<std::string> hooked_types;
  for (const auto& item : root.named_modules("", /*include_self=*/false)) {
    torch::nn::Module& m = *item.value();
    if (is_hooked(m)) hooked_types.insert(m.name());
    if (!policy_selects(policy, m, item.key())) continue;
    VOLT_CHECK(is_hooked(m), ConfigError, "config key '", config_key, "': it selects '", item.key(), "' (", m.name(),
               "), which is not a volt::HookedModule, so ", purpose,
               " cannot act around its forward; derive it from HookedModule or pick its HookedModule children");
    picked.emplace_back(item.key(), &m);
  }
  if (picked.empty()) {
    std::string types;
    for (const auto& t : hooked_types) types += (types.empty() ? "" : ", ") + t;
    throw ConfigError("config key '" + config_key +
                      "': the policy selects no module; wrappable (HookedModule) types "
                      "in this model: " +
                      (types.empty() ? std::string("none") : types));
  }
  return picked;
}

}  // namespace volt
