#pragma once
/// The CLI's registries of classes a config can name by `class_path` (models, data modules,
/// callbacks): each entry reads and checks its `init_args` through its options struct's visit(),
/// lists its keys for --help, and builds an instance. Internal to cli/ (volt::CLI's add_* calls
/// build the entries). Thread-safety: filled before CLI::main runs, read-only afterwards.
#include <yaml-cpp/yaml.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "volt/core/errors.h"
#include "volt/core/options.h"
#include "volt/core/options_help.h"

namespace volt::detail {

template <class T, class = void>
struct has_prefix_validate : std::false_type {};
template <class T>
struct has_prefix_validate<T, std::void_t<decltype(std::declval<T&>().validate(std::declval<const std::string&>()))>>
    : std::true_type {};
template <class T, class = void>
struct has_plain_validate : std::false_type {};
template <class T>
struct has_plain_validate<T, std::void_t<decltype(std::declval<T&>().validate())>> : std::true_type {};

/// Calls the options' validate(prefix) or validate(), whichever it has (neither: nothing to check).
template <class Options>
void validate_options(Options& o, const std::string& prefix) {
  if constexpr (has_prefix_validate<Options>::value)
    o.validate(prefix);
  else if constexpr (has_plain_validate<Options>::value)
    o.validate();
}

/// `defaults` with the keys of `node` (a map or null) read over them, then validated. Unknown keys
/// and wrong types are ConfigErrors naming `prefix.key`.
template <class Options>
Options read_options(const Options& defaults, const YAML::Node& node, const std::string& prefix) {
  Options o = defaults;
  if (node && !node.IsNull()) {
    if (!node.IsMap()) type_error(prefix, "a map", node);
    YamlReader r(node, prefix);
    o.visit(r);
    r.finish();
  }
  validate_options(o, prefix);
  return o;
}

/// One registered class.
template <class Base>
struct ClassEntry {
  std::string name;
  bool has_options = false;
  /// init_args (a map or null) -> every init arg, defaults filled in; ConfigError naming `prefix.key`.
  std::function<YAML::Node(const YAML::Node& init_args, const std::string& prefix)> resolve;
  /// An instance from resolved init_args (read and validated again, so a linked value is checked).
  std::function<std::shared_ptr<Base>(const YAML::Node& init_args, const std::string& prefix)> make;
  /// The init_args' keys, types and defaults; the defaults as YAML.
  std::vector<OptionHelp> help;
  YAML::Node defaults{YAML::NodeType::Map};
};

/// Throws ConfigError for any key in `init_args` of a class that takes none.
void check_no_init_args(const std::string& class_name, const YAML::Node& init_args, const std::string& prefix);

/// An entry for a class built by `factory(const Options&)` from `defaults` plus init_args.
template <class Base, class Options, class Factory>
ClassEntry<Base> make_entry(std::string name, Options defaults, Factory factory) {
  ClassEntry<Base> e;
  e.name = std::move(name);
  e.has_options = true;
  e.resolve = [defaults](const YAML::Node& init_args, const std::string& prefix) {
    return options_to_yaml(read_options(defaults, init_args, prefix));
  };
  e.make = [defaults, factory](const YAML::Node& init_args, const std::string& prefix) -> std::shared_ptr<Base> {
    return factory(read_options(defaults, init_args, prefix));
  };
  e.help = options_help(defaults);
  e.defaults = options_to_yaml(defaults);
  return e;
}

/// An entry for a class built by `factory()` (no init_args).
template <class Base, class Factory>
ClassEntry<Base> make_entry(std::string name, Factory factory) {
  ClassEntry<Base> e;
  e.name = name;
  e.resolve = [name](const YAML::Node& init_args, const std::string& prefix) {
    check_no_init_args(name, init_args, prefix);
    return YAML::Node(YAML::NodeType::Map);
  };
  e.make = [name, factory](const YAML::Node& init_args, const std::string& prefix) -> std::shared_ptr<Base> {
    check_no_init_args(name, init_args, prefix);
    return factory();
  };
  return e;
}

/// The classes of one kind ("model", "data module", "callback"), in registration order.
template <class Base>
class ClassRegistry {
 public:
  explicit ClassRegistry(std::string kind) : kind_(std::move(kind)) {}

  /// Adds `entry`; returns "" or why it cannot be added (an empty or duplicate name).
  std::string add(ClassEntry<Base> entry) {
    if (entry.name.empty()) return kind_ + ": a registered class needs a name";
    if (find(entry.name)) return kind_ + " '" + entry.name + "' is registered twice";
    entries_.push_back(std::move(entry));
    return "";
  }
  /// The entry named `class_path`, or the one named by its last component (`my_pkg.models.MyNet`
  /// and `my::MyNet` name `MyNet`, as a Lightning config would); nullptr if none.
  const ClassEntry<Base>* find(const std::string& class_path) const {
    for (const auto& e : entries_)
      if (e.name == class_path) return &e;
    const auto cut = class_path.find_last_of(".:");
    if (cut == std::string::npos) return nullptr;
    const std::string last = class_path.substr(cut + 1);
    for (const auto& e : entries_)
      if (e.name == last) return &e;
    return nullptr;
  }
  /// "A, B, C" (or "none").
  std::string names() const {
    std::string out;
    for (const auto& e : entries_) out += (out.empty() ? "" : ", ") + e.name;
    return out.empty() ? "none" : out;
  }
  const std::vector<ClassEntry<Base>>& entries() const { return entries_; }
  /// The class a section without class_path means when several are registered ("" for none).
  std::string default_name;
  const std::string& kind() const { return kind_; }

 private:
  std::string kind_;
  std::vector<ClassEntry<Base>> entries_;
};

}  // namespace volt::detail
