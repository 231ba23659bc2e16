#include "volt/cli/args.h"

#include <cctype>
#include <cmath>

#include "volt/core/errors.h"

namespace volt::cli {

namespace {

/// A command line being split: the spec, the words and the result so far.
class Splitter {
 public:
  Splitter(const ArgSpec& spec, const std::vector<std::string>& words) : spec_(spec), words_(words) {
    out_.command = spec.command;
  }

  Args run() {
    bool options_done = false;
    for (i_ = 0; i_ < words_.size(); ++i_) {
      const std::string& w = words_[i_];
      if (options_done || !is_option(w)) {
        positional(w);
      } else if (w == "--") {
        options_done = true;
      } else if (w.rfind("--", 0) == 0) {
        long_option(w.substr(2));
      } else {
        short_option(w);
      }
    }
    return std::move(out_);
  }

 private:
  /// A word that starts with '-' and is not a negative number ("-0.5" is a value).
  static bool is_option(const std::string& w) {
    if (w.size() < 2 || w[0] != '-') return false;
    return !(std::isdigit(static_cast<unsigned char>(w[1])) || w[1] == '.');
  }

  [[noreturn]] void fail(const std::string& message) const {
    throw ConfigError(detail::str_cat(spec_.command, ": ", message, spec_.usage.empty() ? "" : "\n", spec_.usage));
  }

  const Flag* find(const std::string& name) const {
    for (const auto& f : spec_.flags)
      if (f.name == name) return &f;
    return nullptr;
  }

  std::string known() const {
    std::string s;
    for (const auto& f : spec_.flags) {
      s += s.empty() ? "--" : ", --";
      s += f.name;
      if (f.short_name) s += std::string(" (-") + f.short_name + ")";
    }
    return s.empty() ? "none" : s;
  }

  /// The word after `spelled` (`-o` or `--output`) as the value of `--long_name`; a missing one (the
  /// end, or another flag) is an error.
  std::string next_value(const std::string& spelled, const std::string& long_name, const std::string& value_name) {
    const bool missing = i_ + 1 >= words_.size() || words_[i_ + 1].rfind("--", 0) == 0;
    if (missing) {
      const std::string v = value_name.empty() ? "VALUE" : value_name;
      fail(detail::str_cat("option ", spelled, " needs a value (", spelled, " ", v,
                           i_ + 1 < words_.size()
                               ? detail::str_cat("; for a value that starts with --, write --", long_name, "=", v)
                               : std::string(),
                           ")"));
    }
    return words_[++i_];
  }

  void long_option(const std::string& body) {
    const auto eq = body.find('=');
    const std::string name = body.substr(0, eq);
    const Flag* f = find(name);
    if (f == nullptr) {
      if (spec_.overrides && !name.empty()) {
        const std::string value = eq != std::string::npos ? body.substr(eq + 1) : next_value("--" + name, name, "");
        out_.overrides.push_back(name + "=" + value);
        return;
      }
      fail(detail::str_cat("unknown option --", name, "; known: ", known()));
    }
    if (!f->takes_value) {
      if (eq != std::string::npos) fail(detail::str_cat("option --", name, " takes no value (got '--", body, "')"));
      record(*f, "");
      return;
    }
    record(*f, eq != std::string::npos ? body.substr(eq + 1) : next_value("--" + name, name, f->value_name));
  }

  void short_option(const std::string& w) {
    const Flag* f = nullptr;
    for (const auto& g : spec_.flags)
      if (w.size() == 2 && g.short_name == w[1]) f = &g;
    if (f == nullptr) fail(detail::str_cat("unknown option ", w, "; known: ", known()));
    record(*f, f->takes_value ? next_value(w, f->name, f->value_name) : "");
  }

  void record(const Flag& f, const std::string& value) {
    auto it = out_.flags.find(f.name);
    if (it != out_.flags.end() && !f.repeatable)
      fail(f.takes_value ? detail::str_cat("option --", f.name, " is given twice ('", it->second, "', then '", value,
                                           "'); give it once")
                         : detail::str_cat("option --", f.name, " is given twice; give it once"));
    out_.flags[f.name] = value;
    if (f.repeatable) out_.lists[f.name].push_back(value);
  }

  void positional(const std::string& w) {
    if (out_.positional.size() >= spec_.max_positional)
      fail(spec_.max_positional == 0
               ? detail::str_cat("unexpected argument '", w, "' (this command takes options only)")
               : detail::str_cat("unexpected argument '", w, "' (this command takes ", spec_.max_positional,
                                 spec_.max_positional == 1 ? " argument" : " arguments", " besides its options)"));
    out_.positional.push_back(w);
  }

  const ArgSpec& spec_;
  const std::vector<std::string>& words_;
  size_t i_ = 0;
  Args out_;
};

}  // namespace

std::string Args::get(const std::string& flag, const std::string& fallback) const {
  auto it = flags.find(flag);
  return it == flags.end() ? fallback : it->second;
}

std::vector<std::string> Args::all(const std::string& flag) const {
  auto it = lists.find(flag);
  return it == lists.end() ? std::vector<std::string>{} : it->second;
}

int64_t Args::get_int(const std::string& flag, int64_t fallback, int64_t lo, int64_t hi) const {
  if (!has(flag)) return fallback;
  const std::string v = get(flag);
  try {
    size_t pos = 0;
    const long long x = std::stoll(v, &pos);
    if (pos == v.size() && x >= lo && x <= hi) return x;
  } catch (const std::exception&) {
  }
  throw ConfigError(
      detail::str_cat(command, ": option --", flag, ": expected an integer from ", lo, " to ", hi, ", got '", v, "'"));
}

double Args::get_double(const std::string& flag, double fallback) const {
  if (!has(flag)) return fallback;
  const std::string v = get(flag);
  try {
    size_t pos = 0;
    const double x = std::stod(v, &pos);
    if (pos == v.size() && std::isfinite(x)) return x;
  } catch (const std::exception&) {
  }
  throw ConfigError(detail::str_cat(command, ": option --", flag, ": expected a finite number, got '", v, "'"));
}

Args parse_args(const ArgSpec& spec, const std::vector<std::string>& words) { return Splitter(spec, words).run(); }

Args parse_args(const ArgSpec& spec, int argc, char** argv, int first) {
  std::vector<std::string> words;
  for (int i = first; i < argc; ++i) words.emplace_back(argv[i] != nullptr ? argv[i] : "");
  return parse_args(spec, words);
}

}  // namespace volt::cli
