#pragma once
/// A config value that names a class, in LightningCLI's forms (the `model` and `data` sections, each
/// item of `trainer.callbacks`):
///   model: {class_path: MyNet, init_args: {hidden: 64}}   # the full form
///   model: MyNet                                          # a class with its defaults
///   model: {class_path: MyNet, hidden: 64}                # init_args beside class_path
///   model: {hidden: 64}                                   # flat: the one registered class
/// Internal to cli/. Thread-safety: pure functions.
#include <yaml-cpp/yaml.h>

#include <string>

namespace volt::detail {

struct ClassSection {
  std::string class_path;                     ///< "" = not named (the one registered class)
  YAML::Node init_args{YAML::NodeType::Map};  ///< always a map
  bool flat = true;                           ///< written without class_path / init_args
  /// The prefix of the init_args' keys in messages: "model" when written flat, else "model.init_args".
  std::string args_prefix(const std::string& key) const { return flat ? key : key + ".init_args"; }
};

/// Reads one section (`key` names it in errors); null or absent gives an empty flat section.
ClassSection parse_class_section(const YAML::Node& node, const std::string& key);
/// The section as YAML: flat sections as their init_args map, others as {class_path, init_args}.
YAML::Node class_section_yaml(const ClassSection& section);

/// Merges `over` into the YAML section `base` (either may be absent), in place, as a later config
/// file does: init_args key by key; naming another class drops the earlier class's init_args.
/// The result stays flat when both were flat. `implied` is the class a section without class_path
/// means (the default or only registered one; "" when none): a flat section's arguments are its.
void merge_class_section(YAML::Node& root, const std::string& key, const YAML::Node& over,
                         const std::string& implied = "");

/// Applies the override `--<key>.<rest>=value` to the class section root[key]: `class_path`,
/// `init_args.X`, and `X` (an init arg, flat or not). `rest` empty: the value replaces the
/// section as a config file's would (merged).
void override_class_section(YAML::Node& root, const std::string& key, const std::string& rest, const std::string& value,
                            const std::string& implied = "");

}  // namespace volt::detail
