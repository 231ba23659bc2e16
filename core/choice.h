#pragma once
/// Choice<E>: a config value from a fixed set of names, typed as the enum E inside volt and spelled
/// as Lightning spells it at the YAML and C++ boundary. Options structs hold Choices, so code
/// switches on enums while users keep writing `sharding_strategy: SHARD_GRAD_OP` in YAML or
/// `options.sharding_strategy = "SHARD_GRAD_OP"` in C++.
///
/// Validation happens once, in the options' validate() (as for every other key), so an unknown
/// spelling is a ConfigError naming the config key and listing the valid values; value() before
/// that throws the same error. Each enum describes itself by specializing ChoiceNames<E>:
///   static const std::vector<std::pair<E, const char*>>& names();  // canonical spellings
///   static std::string normalize(std::string text);                // case folding, aliases
/// Thread-safety: a value type.
#include <cctype>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "volt/core/errors.h"

namespace volt {

template <class E>
struct ChoiceNames;

template <class E>
class Choice {
 public:
  Choice(E value) : text_(name_of(value)) {}            // NOLINT: implicit on purpose
  Choice(const char* text) : text_(text) {}             // NOLINT
  Choice(std::string text) : text_(std::move(text)) {}  // NOLINT

  /// Normalizes the spelling and checks that it names a value; ConfigError naming `key` otherwise.
  void validate(const std::string& key) {
    text_ = ChoiceNames<E>::normalize(text_);
    value_or_throw(key);
  }
  /// The enum value; ConfigError if the spelling names none (validate() first to name the key).
  E value() const { return value_or_throw(""); }
  /// Whether the spelling names a value (as it is, without normalizing).
  bool is_valid() const { return valid(); }
  /// The spelling, as YAML and logs show it.
  const std::string& text() const { return text_; }

  bool operator==(E e) const { return valid() && value() == e; }
  bool operator!=(E e) const { return !(*this == e); }
  friend bool operator==(const Choice& a, const Choice& b) { return a.text_ == b.text_; }
  friend bool operator!=(const Choice& a, const Choice& b) { return a.text_ != b.text_; }
  friend bool operator==(const Choice& a, const std::string& b) { return a.text_ == b; }
  friend bool operator==(const Choice& a, const char* b) { return a.text_ == b; }
  friend bool operator!=(const Choice& a, const char* b) { return a.text_ != b; }
  friend std::ostream& operator<<(std::ostream& os, const Choice& c) { return os << c.text_; }

 private:
  static std::string name_of(E value) {
    for (const auto& [v, n] : ChoiceNames<E>::names())
      if (v == value) return n;
    return "?";
  }
  bool valid() const {
    for (const auto& [v, n] : ChoiceNames<E>::names())
      if (text_ == n) return true;
    return false;
  }
  E value_or_throw(const std::string& key) const {
    std::string valid;
    for (const auto& [v, n] : ChoiceNames<E>::names()) {
      if (text_ == n) return v;
      valid += (valid.empty() ? "" : ", ") + std::string(n);
    }
    throw ConfigError(detail::str_cat(key.empty() ? std::string() : "config key '" + key + "': ", "unknown value '",
                                      text_, "'; valid: ", valid));
  }
  std::string text_;
};

namespace detail {
inline std::string to_upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
inline std::string to_lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
}  // namespace detail

}  // namespace volt
