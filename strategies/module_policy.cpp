#include "volt/strategies/module_policy.h"

#include <algorithm>
#include <set>

#include "volt/core/errors.h"
#include "volt/core/hooked_module.h"

namespace volt {

std::string short_type_name(const std::string& type) {
  std::string s = type.substr(type.rfind(':') == std::string::npos ? 0 : type.rfind(':') + 1);
  if (s.size() > 4 && s.compare(s.size() - 4, 4, "Impl") == 0) s.resize(s.size() - 4);
  return s;
}

bool policy_selects(const ModulePolicy& p, const torch::nn::Module& m, const std::string& name) {
  if (p.predicate && p.predicate(m, name)) return true;
  for (const auto& t : p.module_types)
    if (t == m.name() || t == short_type_name(m.name())) return true;
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
    if (is_hooked(m)) hooked_types.insert(short_type_name(m.name()));
    if (!policy_selects(policy, m, item.key())) continue;
    // A plain module inside a picked one (a Linear inside a picked layer, with "Linear" listed for
    // the model's own wrapped Linears) belongs to that unit already.
    const bool inside_pick = std::any_of(picked.begin(), picked.end(), [&](const auto& p) {
      return item.key().size() > p.first.size() && item.key().compare(0, p.first.size() + 1, p.first + ".") == 0;
    });
    if (!is_hooked(m) && inside_pick) continue;
    VOLT_CHECK(is_hooked(m), ConfigError, "config key '", config_key, "': it selects '", item.key(), "' (", m.name(),
               "), which is not a volt::HookedModule, so ", purpose,
               " cannot act around its forward; wrap it where the model is built as volt::hooked(...) "
               "(core/hooked_wrapper.h), derive it from HookedModule, or pick its HookedModule children");
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
