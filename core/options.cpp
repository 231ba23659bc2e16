#include "volt/core/options.h"

#include <cmath>
#include <sstream>

#include "volt/core/yaml_load.h"

namespace volt {

int64_t BatchLimit::apply(int64_t available) const {
  if (is_fraction) return static_cast<int64_t>(std::floor(value * static_cast<double>(available)));
  return std::min<int64_t>(static_cast<int64_t>(value), available);
}

namespace detail {

std::string join_key(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

std::string describe(const YAML::Node& n) {
  if (!n) return "nothing";
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a map";
  return "null";
}

void type_error(const std::string& key, const char* expected, const YAML::Node& n) {
  throw ConfigError(str_cat("config key '", key, "': expected ", expected, ", got ", describe(n)));
}

bool YamlCodec<bool>::decode(const YAML::Node& n, const std::string& key) {
  bool v;
  if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) type_error(key, "true or false", n);
  return v;
}

int64_t YamlCodec<int64_t>::decode(const YAML::Node& n, const std::string& key) {
  if (!n.IsScalar()) type_error(key, "an integer", n);
  const std::string& s = n.Scalar();
  size_t pos = 0;
  int64_t v = 0;
  try {
    v = std::stoll(s, &pos);
  } catch (...) {
    type_error(key, "an integer", n);
  }
  if (pos != s.size()) type_error(key, "an integer", n);
  return v;
}

double YamlCodec<double>::decode(const YAML::Node& n, const std::string& key) {
  if (!n.IsScalar()) type_error(key, "a number", n);
  const std::string& s = n.Scalar();
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (...) {
    type_error(key, "a number", n);
  }
  if (pos != s.size()) type_error(key, "a number", n);
  return v;
}

std::string YamlCodec<std::string>::decode(const YAML::Node& n, const std::string& key) {
  if (!n.IsScalar()) type_error(key, "a string", n);
  return n.Scalar();
}

BatchLimit YamlCodec<BatchLimit>::decode(const YAML::Node& n, const std::string& key) {
  if (!n.IsScalar()) type_error(key, "an integer (batches) or a float (fraction)", n);
  const std::string& s = n.Scalar();
  bool is_float = s.find_first_of(".eE") != std::string::npos;
  if (is_float) {
    double f = YamlCodec<double>::decode(n, key);
    VOLT_CHECK(f >= 0.0 && f <= 1.0, ConfigError, "config key '", key, "': a fraction must be in [0, 1], got ", s);
    return BatchLimit::fraction(f);
  }
  int64_t c = YamlCodec<int64_t>::decode(n, key);
  VOLT_CHECK(c >= 0, ConfigError, "config key '", key, "': a batch count must be >= 0, got ", s);
  return BatchLimit::count(c);
}

YAML::Node YamlCodec<BatchLimit>::encode(const BatchLimit& v) {
  if (v.is_fraction) {
    std::ostringstream os;
    os << v.value;
    std::string s = os.str();
    if (s.find_first_of(".eE") == std::string::npos) s += ".0";
    return YAML::Node(s);
  }
  return YAML::Node(static_cast<int64_t>(v.value));
}

}  // namespace detail

YamlReader::YamlReader(YAML::Node node, std::string prefix) : node_(std::move(node)), prefix_(std::move(prefix)) {}

void YamlReader::finish() const {
  if (!node_.IsMap()) return;
  for (const auto& kv : node_) {
    const std::string key = kv.first.as<std::string>();
    if (seen_.count(key)) continue;
    std::string valid;
    for (const auto& s : seen_) valid += (valid.empty() ? "" : ", ") + s;
    throw ConfigError(
        detail::str_cat("unknown config key '", detail::join_key(prefix_, key), "'; valid keys here: ", valid));
  }
}

void apply_override(YAML::Node& root, const std::string& dotted_key, const std::string& value) {
  VOLT_CHECK(!dotted_key.empty(), ConfigError, "empty override key");
  VOLT_CHECK(dotted_key.back() != '.', ConfigError, "malformed override key '", dotted_key, "'");
  if (!root || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  std::vector<std::string> parts;
  std::stringstream ss(dotted_key);
  for (std::string p; std::getline(ss, p, '.');) {
    VOLT_CHECK(!p.empty(), ConfigError, "malformed override key '", dotted_key, "'");
    parts.push_back(p);
  }
  YAML::Node parsed = detail::load_yaml(value, "override --" + dotted_key + ": cannot parse value '" + value + "'");
  // "runs/x #1" is a path to the user, but YAML reads " #1" as a comment and drops it: a scalar
  // that lost a '#' this way is taken as the text given.
  const size_t hash = value.find('#');
  const bool comment = hash != std::string::npos && (hash == 0 || value[hash - 1] == ' ' || value[hash - 1] == '\t');
  if (comment && (parsed.IsNull() || (parsed.IsScalar() && parsed.Scalar().find('#') == std::string::npos))) {
    const size_t b = value.find_first_not_of(" \t"), e = value.find_last_not_of(" \t");
    parsed = YAML::Node(value.substr(b, e - b + 1));
  }
  // Walk down, creating maps as needed. yaml-cpp nodes are handles, so assignment writes through.
  std::vector<YAML::Node> path{root};
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node cur = path.back();
    if (cur[parts[i]] && !cur[parts[i]].IsMap()) {
      // `strategy: fsdp` overridden with `strategy.sharding_strategy=...`: promote to a map.
      if (cur[parts[i]].IsScalar()) {
        YAML::Node m(YAML::NodeType::Map);
        m["name"] = cur[parts[i]].Scalar();
        cur[parts[i]] = m;
      } else {
        throw ConfigError(detail::str_cat("override --", dotted_key, ": '", parts[i], "' is not a map"));
      }
    }
    if (!cur[parts[i]]) cur[parts[i]] = YAML::Node(YAML::NodeType::Map);
    path.push_back(cur[parts[i]]);
  }
  YAML::Node target = path.back();
  const YAML::Node& current = target;  // a const lookup adds no entry
  if (parsed.IsMap() && current[parts.back()] && current[parts.back()].IsMap() &&
      !detail::names_another_class(current[parts.back()], parsed, parts.back())) {
    // --trainer={max_steps: 1} keeps the other trainer keys, as a later config file would.
    detail::merge_config_maps(target[parts.back()], parsed);
    return;
  }
  target[parts.back()] = parsed;
}

}  // namespace volt
