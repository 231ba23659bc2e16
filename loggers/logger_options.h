#pragma once
/// The `trainer.logger` option: which loggers the Trainer creates (on global rank 0). YAML:
///   logger: true                 # the default: a CSV logger (false: none; null: the default)
///   logger: tensorboard          # a name: csv, tensorboard (or CSVLogger, TensorBoardLogger)
///   logger: [csv, tensorboard]   # several: each gets every metric
///   logger:                      # LightningCLI's form, with constructor arguments
///     - class_path: TensorBoardLogger
///       init_args: {save_dir: tb, name: exp, version: 3, default_hp_metric: false, flush_secs: 120}
///     - class_path: CSVLogger
///       init_args: {flush_logs_every_n_steps: 100}
/// C++: options.logger = false; options.logger = "tensorboard"; options.logger = {"csv", "tensorboard"};
/// Loggers with the same save_dir and name and no version write into one version_N folder; two
/// loggers of one kind writing into one folder are refused (their files would collide).
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "volt/core/options.h"
#include "volt/core/options_help.h"

namespace volt {

class Logger;

/// One logger: its kind and constructor arguments (CSVLogger's and TensorBoardLogger's).
struct LoggerConfig {
  std::string kind = "csv";  ///< "csv" or "tensorboard" (class names are accepted and normalized)
  std::string save_dir;      ///< "" = trainer.default_root_dir
  std::string name = "lightning_logs";
  std::optional<int64_t> version;          ///< none = the next free version_N
  bool default_hp_metric = true;           ///< tensorboard: hp_metric = -1 when no metric is given
  int64_t flush_logs_every_n_steps = 100;  ///< csv: metrics.csv written when (step + 1) is a multiple
  double flush_secs = 120;                 ///< tensorboard: events written at most this long after logging

  LoggerConfig() = default;
  LoggerConfig(const char* k) : kind(k) {}             // NOLINT: implicit on purpose
  LoggerConfig(std::string k) : kind(std::move(k)) {}  // NOLINT
  /// The constructor arguments (the init_args keys) of this kind.
  template <class V>
  void visit(V& v) {
    v("save_dir", save_dir)("name", name)("version", version);
    if (kind == "tensorboard") v("default_hp_metric", default_hp_metric)("flush_secs", flush_secs);
    if (kind == "csv") v("flush_logs_every_n_steps", flush_logs_every_n_steps);
  }
  /// "CSVLogger" or "TensorBoardLogger".
  std::string class_name() const;
};

struct LoggerOptions {
  std::vector<LoggerConfig> loggers{LoggerConfig()};  ///< empty = no logger

  LoggerOptions() = default;
  LoggerOptions(bool enabled);                                                 // NOLINT: `logger = false`
  LoggerOptions(const char* kind) : loggers{LoggerConfig(kind)} {}             // NOLINT
  LoggerOptions(std::string kind) : loggers{LoggerConfig(std::move(kind))} {}  // NOLINT
  LoggerOptions(std::initializer_list<LoggerConfig> list) : loggers(list) {}   // NOLINT
  LoggerOptions(std::vector<LoggerConfig> list) : loggers(std::move(list)) {}  // NOLINT
  /// Whether any logger is configured.
  explicit operator bool() const { return !loggers.empty(); }
  /// Normalizes the kinds ("TensorBoardLogger" -> "tensorboard") and checks them; throws
  /// ConfigError naming trainer.logger[i] and the valid choices.
  void validate();
};

/// "csv" or "tensorboard" for a logger name or class path (any case, "Logger" suffix and module
/// path optional); "" when it names neither.
std::string normalize_logger_kind(const std::string& name);

/// Creates the loggers `options` names, in order. save_dir "" means `default_root_dir`. Loggers
/// with the same save_dir and name and no explicit version share the version_N folder the first
/// of them creates.
std::vector<std::shared_ptr<Logger>> create_loggers(const LoggerOptions& options, const std::string& default_root_dir);

namespace detail {
template <>
struct YamlCodec<LoggerOptions> {
  static LoggerOptions decode(const YAML::Node& n, const std::string& key);
  /// `true` for the default, `false` for none, else a list of {class_path, init_args}.
  static YAML::Node encode(const LoggerOptions& v);
};
template <>
struct HelpType<LoggerOptions> {
  static std::string name() { return "bool|csv|tensorboard|list"; }
};
}  // namespace detail

}  // namespace volt
