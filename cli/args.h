#pragma once
/// The words of a subcommand's command line, split by the flags it knows. A subcommand lists its
/// flags and gets their values by name:
///
///   volt::cli::ArgSpec spec{"generate", {{"ckpt_path"}, {"prompt"}, {"max_new_tokens"}}};
///   const volt::cli::Args a = volt::cli::parse_args(spec, argc, argv, 2);
///   const int64_t n = a.get_int("max_new_tokens", 64, 1, 1 << 20);
///
/// Forms: `--name=value` and `--name value`; `-x value` for a flag with a short name; `--name` alone
/// for a switch; any other word is positional; after `--` every word is positional. Every mistake
/// is a ConfigError that names the command and the flag, followed by ArgSpec::usage: an unknown
/// flag (with the known ones), a missing value (a flag at the end, or followed by another `--flag`:
/// write `--name=--text` for such a value), a value given to a switch, a flag given twice (unless
/// it is repeatable), a positional word too many.
///
/// Thread-safety: plain values; parse_args keeps no state.
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace volt::cli {

/// One flag a subcommand knows.
struct Flag {
  std::string name;         ///< without the dashes: "max_new_tokens"
  bool takes_value = true;  ///< false: a switch, given as `--name` alone
  bool repeatable = false;  ///< may be given several times; Args::all() keeps every value in order
  char short_name = 0;      ///< e.g. 'o': `-o VALUE` too
  std::string value_name;   ///< in messages: "FILE" ("VALUE" when empty)
};

/// What a subcommand accepts.
struct ArgSpec {
  std::string command;  ///< starts every error message: "consolidate"
  std::vector<Flag> flags;
  size_t max_positional = 0;
  /// Accept every other `--dotted.key=value` (or `--dotted.key value`) as a config override, in
  /// order, instead of refusing it as an unknown flag (fit, validate, test, predict).
  bool overrides = false;
  std::string usage;  ///< appended to every error ("" for none)
};

/// The split command line.
struct Args {
  /// Each flag given, by name: its value ("" for a switch); a repeatable flag's last value.
  std::map<std::string, std::string> flags;
  /// Each repeatable flag given: every value, in order.
  std::map<std::string, std::vector<std::string>> lists;
  std::vector<std::string> positional;
  /// With ArgSpec::overrides: "key=value" for each other flag, in order.
  std::vector<std::string> overrides;
  std::string command;  ///< ArgSpec::command, for the messages of the getters below

  bool has(const std::string& flag) const { return flags.count(flag) > 0; }
  /// The flag's value, or `fallback` when it was not given.
  std::string get(const std::string& flag, const std::string& fallback = "") const;
  /// Every value of a repeatable flag (none when not given).
  std::vector<std::string> all(const std::string& flag) const;
  /// The flag's value as an integer in [lo, hi], `fallback` when not given; ConfigError naming
  /// the flag for anything else.
  int64_t get_int(const std::string& flag, int64_t fallback, int64_t lo = std::numeric_limits<int64_t>::min(),
                  int64_t hi = std::numeric_limits<int64_t>::max()) const;
  /// The flag's value as a finite number, `fallback` when not given; ConfigError naming the flag
  /// for anything else.
  double get_double(const std::string& flag, double fallback) const;
};

/// Splits `words` (the words after the subcommand) by `spec`. Throws ConfigError (see above).
Args parse_args(const ArgSpec& spec, const std::vector<std::string>& words);
/// parse_args of argv[first..argc).
Args parse_args(const ArgSpec& spec, int argc, char** argv, int first);

}  // namespace volt::cli
