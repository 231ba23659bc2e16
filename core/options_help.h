#pragma once
/// Help text from options structs: HelpRecorder is one more visitor for `visit()` (beside YamlReader
/// and YamlWriter) that records every key with its type and default, so a command's `--help` is
/// generated from the same list of fields that reads the YAML and cannot go stale.
///
///   for (const auto& h : options_help(TrainerOptions{}, "trainer")) ...  // {"trainer.max_steps", "int", "-1"}
///
/// Nested options structs are listed key by key ("trainer.slurm.auto_requeue"). Types are spelled as
/// in YAML: bool, int, float, str, list[T], T|null, int|float (a batch count or fraction) and, for a
/// Choice, its values (norm|value). A type with its own YAML codec and no visit() is named by the
/// shape of its default (map, list or value). Thread-safety: value types and pure functions.
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "volt/core/choice.h"
#include "volt/core/options.h"

namespace volt {

/// One key of an options struct: full dotted key, type as spelled in YAML, default as YAML text,
/// and an optional note (when the key applies).
struct OptionHelp {
  std::string key;
  std::string type;
  std::string default_value;
  std::string note;
};

namespace detail {
/// The type of a field as the help spells it; "" = unknown (the default's YAML shape is used).
template <class T>
struct HelpType {
  static std::string name() { return ""; }
};
template <>
struct HelpType<bool> {
  static std::string name() { return "bool"; }
};
template <>
struct HelpType<int> {
  static std::string name() { return "int"; }
};
template <>
struct HelpType<int64_t> {
  static std::string name() { return "int"; }
};
template <>
struct HelpType<double> {
  static std::string name() { return "float"; }
};
template <>
struct HelpType<std::string> {
  static std::string name() { return "str"; }
};
template <>
struct HelpType<BatchLimit> {
  static std::string name() { return "int|float"; }
};
template <class T>
struct HelpType<std::vector<T>> {
  static std::string name() {
    const std::string inner = HelpType<T>::name();
    return inner.empty() ? "list" : "list[" + inner + "]";
  }
};
template <class T>
struct HelpType<std::optional<T>> {
  static std::string name() {
    const std::string inner = HelpType<T>::name();
    return (inner.empty() ? "value" : inner) + "|null";
  }
};
template <class E>
struct HelpType<Choice<E>> {
  static std::string name() {
    std::string out;
    for (const auto& [value, text] : ChoiceNames<E>::names()) out += (out.empty() ? "" : "|") + std::string(text);
    return out;
  }
};

/// A YAML value on one line (flow style); "" for an empty string, null for none.
std::string yaml_inline(const YAML::Node& node);
/// "map", "list" or "value": the shape of a default whose type has no HelpType.
std::string yaml_shape(const YAML::Node& node);
}  // namespace detail

/// The visitor: `options.visit(recorder)` appends one OptionHelp per leaf key.
class HelpRecorder {
 public:
  explicit HelpRecorder(std::string prefix = "") : prefix_(std::move(prefix)) {}

  template <class T>
  HelpRecorder& operator()(const char* key, T& field) {
    const std::string full = detail::join_key(prefix_, key);
    if constexpr (detail::has_visit<T>::value) {
      HelpRecorder sub(full);
      field.visit(sub);
      entries_.insert(entries_.end(), sub.entries_.begin(), sub.entries_.end());
      // A struct whose keys are its data (GradientAccumulationScheduler's {epoch: factor}): the key itself.
      if (sub.entries_.empty()) entries_.push_back({full, "map", "{}", ""});
    } else {
      const YAML::Node value = detail::YamlCodec<T>::encode(field);
      std::string type = detail::HelpType<T>::name();
      if (type.empty()) type = detail::yaml_shape(value);
      entries_.push_back({full, type, detail::yaml_inline(value), ""});
    }
    return *this;
  }
  void accept(const char*) {}
  const std::vector<OptionHelp>& entries() const { return entries_; }

 private:
  std::string prefix_;
  std::vector<OptionHelp> entries_;
};

/// Every key of `defaults` (a copy is visited) with `prefix` in front.
template <class Options>
std::vector<OptionHelp> options_help(Options defaults, const std::string& prefix = "") {
  HelpRecorder r(prefix);
  defaults.visit(r);
  return r.entries();
}

/// The entries as aligned lines, `<indent><key_prefix><key>  (type: T, default: D)  <note>`.
std::string format_options_help(const std::vector<OptionHelp>& entries, const std::string& key_prefix = "",
                                const std::string& indent = "  ");

}  // namespace volt
