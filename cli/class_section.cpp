#include "volt/cli/class_section.h"

#include "volt/cli/config_files.h"
#include "volt/core/errors.h"
#include "volt/core/options.h"
#include "volt/core/yaml_load.h"

namespace volt::detail {

namespace {
YAML::Node parse_value(const std::string& key, const std::string& value) {
  return load_yaml(value, "override --" + key + ": cannot parse value '" + value + "'");
}
}  // namespace

ClassSection parse_class_section(const YAML::Node& node, const std::string& key) {
  ClassSection s;
  if (!node || node.IsNull()) return s;
  if (node.IsScalar()) {
    s.class_path = node.Scalar();
    s.flat = false;
    return s;
  }
  if (!node.IsMap()) type_error(key, "a class name or a map (class_path, init_args)", node);
  if (!node["class_path"] && !node["init_args"]) {
    s.init_args = YAML::Clone(node);
    return s;
  }
  s.flat = false;
  if (const YAML::Node cp = node["class_path"]) {
    if (!cp.IsScalar() || cp.Scalar().empty()) type_error(key + ".class_path", "a class name", cp);
    s.class_path = cp.Scalar();
  }
  if (const YAML::Node args = node["init_args"]) {
    if (!args.IsNull() && !args.IsMap()) type_error(key + ".init_args", "a map", args);
    if (args.IsMap()) s.init_args = YAML::Clone(args);
  }
  // Init args written beside class_path (jsonargparse accepts them there too).
  for (const auto& kv : node) {
    const std::string k = kv.first.Scalar();
    if (k == "class_path" || k == "init_args") continue;
    VOLT_CHECK(!s.init_args[k], ConfigError, "config key '", key, ".", k, "' is given both beside class_path and in ",
               key, ".init_args; keep one");
    s.init_args[k] = YAML::Clone(kv.second);
  }
  return s;
}

YAML::Node class_section_yaml(const ClassSection& section) {
  if (section.flat) return YAML::Clone(section.init_args);
  YAML::Node out(YAML::NodeType::Map);
  if (!section.class_path.empty()) out["class_path"] = section.class_path;
  out["init_args"] = YAML::Clone(section.init_args);
  return out;
}

void merge_class_section(YAML::Node& root, const std::string& key, const YAML::Node& over, const std::string& implied) {
  ClassSection base = parse_class_section(root[key], key);
  const ClassSection next = parse_class_section(over, key);
  if (!next.flat) {
    // Another class: its own defaults, not the earlier class's arguments (a section without
    // class_path holds the implied class's).
    const std::string base_class = base.class_path.empty() ? implied : base.class_path;
    if (!next.class_path.empty() && !base_class.empty() && next.class_path != base_class)
      base.init_args = YAML::Node(YAML::NodeType::Map);
    if (!next.class_path.empty()) base.class_path = next.class_path;
    base.flat = false;
  }
  merge_yaml(base.init_args, next.init_args);
  root[key] = class_section_yaml(base);
}

void override_class_section(YAML::Node& root, const std::string& key, const std::string& rest, const std::string& value,
                            const std::string& implied) {
  if (rest.empty() || rest == "class_path") {
    const YAML::Node parsed = parse_value(rest.empty() ? key : key + "." + rest, value);
    if (rest.empty()) {
      merge_class_section(root, key, parsed, implied);
    } else {
      if (!parsed.IsScalar() || parsed.Scalar().empty()) type_error(key + ".class_path", "a class name", parsed);
      YAML::Node over(YAML::NodeType::Map);
      over["class_path"] = parsed.Scalar();
      merge_class_section(root, key, over, implied);
    }
    return;
  }
  ClassSection s = parse_class_section(root[key], key);
  std::string arg = rest;
  if (rest == "init_args" || rest.rfind("init_args.", 0) == 0) {
    s.flat = false;
    arg = rest == "init_args" ? "" : rest.substr(10);
  }
  if (arg.empty()) {
    YAML::Node over(YAML::NodeType::Map);
    over["init_args"] = parse_value(key + "." + rest, value);
    merge_class_section(root, key, over, implied);
    return;
  }
  apply_override(s.init_args, arg, value);
  root[key] = class_section_yaml(s);
}

}  // namespace volt::detail
