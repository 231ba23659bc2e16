#pragma once
/// Mapping between plain option structs and YAML, one-to-one. An options struct exposes
///   template <class V> void visit(V& v) { v("max_steps", max_steps); ... }
/// and gets reading (unknown keys and wrong types are ConfigErrors naming the full dotted key),
/// writing (for --print_config and the saved config) and dotted overrides for free.
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "volt/core/choice.h"
#include "volt/core/errors.h"

namespace volt {

/// Lightning's int-or-float limits: an integer is a count of batches, a float a fraction of them.
struct BatchLimit {
  double value = 1.0;
  bool is_fraction = true;
  static BatchLimit count(int64_t n) { return {static_cast<double>(n), false}; }
  static BatchLimit fraction(double f) { return {f, true}; }
  /// The number of batches this limit allows out of `available`.
  int64_t apply(int64_t available) const;
  bool operator==(const BatchLimit& o) const { return value == o.value && is_fraction == o.is_fraction; }
};

class YamlReader;
class YamlWriter;

namespace detail {
std::string join_key(const std::string& prefix, const std::string& key);
std::string describe(const YAML::Node& n);
[[noreturn]] void type_error(const std::string& key, const char* expected, const YAML::Node& n);

template <class T>
struct YamlCodec;  // decode(node, key) / encode(value)

template <>
struct YamlCodec<bool> {
  static bool decode(const YAML::Node& n, const std::string& key);
  static YAML::Node encode(bool v) { return YAML::Node(v); }
};
template <>
struct YamlCodec<int64_t> {
  static int64_t decode(const YAML::Node& n, const std::string& key);
  static YAML::Node encode(int64_t v) { return YAML::Node(v); }
};
template <>
struct YamlCodec<int> {
  static int decode(const YAML::Node& n, const std::string& key) {
    return static_cast<int>(YamlCodec<int64_t>::decode(n, key));
  }
  static YAML::Node encode(int v) { return YAML::Node(v); }
};
template <>
struct YamlCodec<double> {
  static double decode(const YAML::Node& n, const std::string& key);
  static YAML::Node encode(double v) { return YAML::Node(v); }
};
template <>
struct YamlCodec<std::string> {
  static std::string decode(const YAML::Node& n, const std::string& key);
  static YAML::Node encode(const std::string& v) { return YAML::Node(v); }
};
template <>
struct YamlCodec<BatchLimit> {
  static BatchLimit decode(const YAML::Node& n, const std::string& key);
  static YAML::Node encode(const BatchLimit& v);
};
template <class T>
struct YamlCodec<std::vector<T>> {
  static std::vector<T> decode(const YAML::Node& n, const std::string& key) {
    if (n.IsNull()) return {};
    if (!n.IsSequence()) type_error(key, "a list", n);
    std::vector<T> out;
    for (size_t i = 0; i < n.size(); ++i)
      out.push_back(YamlCodec<T>::decode(n[i], key + "[" + std::to_string(i) + "]"));
    return out;
  }
  static YAML::Node encode(const std::vector<T>& v) {
    YAML::Node n(YAML::NodeType::Sequence);
    for (const auto& x : v) n.push_back(YamlCodec<T>::encode(x));
    return n;
  }
};
template <class E>
struct YamlCodec<Choice<E>> {
  // The spelling is kept as given; the options' validate() checks it and names the key.
  static Choice<E> decode(const YAML::Node& n, const std::string& key) {
    return Choice<E>(YamlCodec<std::string>::decode(n, key));
  }
  static YAML::Node encode(const Choice<E>& v) { return YAML::Node(v.text()); }
};
template <class T>
struct YamlCodec<std::optional<T>> {
  static std::optional<T> decode(const YAML::Node& n, const std::string& key) {
    if (n.IsNull()) return std::nullopt;
    return YamlCodec<T>::decode(n, key);
  }
  static YAML::Node encode(const std::optional<T>& v) { return v ? YamlCodec<T>::encode(*v) : YAML::Node(); }
};

// Options structs (anything with visit()) nest as maps.
template <class T, class = void>
struct has_visit : std::false_type {};
template <class T>
struct has_visit<T, std::void_t<decltype(std::declval<T&>().visit(std::declval<YamlReader&>()))>> : std::true_type {};
}  // namespace detail

/// Reads a YAML map into an options struct. Keys the struct does not visit are errors.
class YamlReader {
 public:
  YamlReader(YAML::Node node, std::string prefix);
  template <class T>
  YamlReader& operator()(const char* key, T& field) {
    seen_.insert(key);
    if (!node_.IsMap() || !node_[key]) return *this;
    const std::string full = detail::join_key(prefix_, key);
    if constexpr (detail::has_visit<T>::value) {
      // A section given as a scalar or a list would otherwise be skipped and its defaults used.
      if (node_[key].IsNull()) return *this;
      if (!node_[key].IsMap()) detail::type_error(full, "a map", node_[key]);
      YamlReader sub(node_[key], full);
      field.visit(sub);
      sub.finish();
    } else {
      field = detail::YamlCodec<T>::decode(node_[key], full);
    }
    return *this;
  }
  /// Marks a key as handled by custom code (so finish() does not call it unknown).
  void accept(const char* key) { seen_.insert(key); }
  const YAML::Node& node() const { return node_; }
  const std::string& prefix() const { return prefix_; }
  /// Throws ConfigError for the first key that no visit() asked for, listing the valid ones.
  void finish() const;

 private:
  YAML::Node node_;
  std::string prefix_;
  std::set<std::string> seen_;
};

/// Writes an options struct as a YAML map (every field, defaults included).
class YamlWriter {
 public:
  YamlWriter() : node_(YAML::NodeType::Map) {}
  template <class T>
  YamlWriter& operator()(const char* key, T& field) {
    if constexpr (detail::has_visit<T>::value) {
      YamlWriter sub;
      field.visit(sub);
      node_[key] = sub.node();
    } else {
      node_[key] = detail::YamlCodec<T>::encode(field);
    }
    return *this;
  }
  void accept(const char*) {}
  YAML::Node& node() { return node_; }

 private:
  YAML::Node node_;
};

template <class Options>
Options options_from_yaml(const YAML::Node& node, const std::string& prefix) {
  Options o;
  if (node && !node.IsNull()) {
    if (!node.IsMap()) detail::type_error(prefix, "a map", node);
    YamlReader r(node, prefix);
    o.visit(r);
    r.finish();
  }
  return o;
}
template <class Options>
YAML::Node options_to_yaml(Options o) {
  YamlWriter w;
  o.visit(w);
  return w.node();
}

/// Applies `key.sub=value` overrides (LightningCLI style) to a YAML tree; the value is parsed as
/// YAML. Throws ConfigError on a malformed override.
void apply_override(YAML::Node& root, const std::string& dotted_key, const std::string& value);

}  // namespace volt
