#include "volt/core/config_diff.h"

#include <set>

#include "volt/core/errors.h"

namespace volt::detail {

namespace {

std::string shown(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "null";
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  YAML::Emitter out;
  out << YAML::Flow << n;
  return out.c_str();
}

std::string key_at(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

}  // namespace

std::string first_difference(const YAML::Node& mine, const YAML::Node& theirs, int64_t rank,
                             const std::string& prefix) {
  auto differ = [&](const std::string& key, const YAML::Node& a, const YAML::Node& b) {
    return str_cat("config key '", key, "' is ", shown(a), " on rank ", rank, " but ", shown(b), " on rank 0");
  };
  if (mine.Type() != theirs.Type()) return differ(prefix, mine, theirs);
  if (mine.IsMap()) {
    std::set<std::string> seen;
    for (const auto& kv : theirs) {
      const std::string k = kv.first.Scalar();
      seen.insert(k);
      const YAML::Node m = mine[k];
      if (!m.IsDefined()) return differ(key_at(prefix, k), YAML::Node(), kv.second);
      std::string d = first_difference(m, kv.second, rank, key_at(prefix, k));
      if (!d.empty()) return d;
    }
    for (const auto& kv : mine)
      if (!seen.count(kv.first.Scalar())) return differ(key_at(prefix, kv.first.Scalar()), kv.second, YAML::Node());
    return "";
  }
  if (mine.IsSequence()) {
    if (mine.size() != theirs.size()) return differ(prefix, mine, theirs);
    for (size_t i = 0; i < mine.size(); ++i) {
      std::string d = first_difference(mine[i], theirs[i], rank, str_cat(prefix, "[", i, "]"));
      if (!d.empty()) return d;
    }
    return "";
  }
  if (mine.IsScalar() && mine.Scalar() != theirs.Scalar()) return differ(prefix, mine, theirs);
  return "";
}

}  // namespace volt::detail
