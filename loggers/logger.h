#pragma once
/// Logger: where the Trainer sends metrics, hyper-parameters, text and the resolved config
/// (Lightning's Logger interface). The Trainer creates its loggers on global rank 0 only and talks
/// to them through one Logger* (a LoggerCollection when there are several). Implementations need
/// not be thread-safe: the Trainer calls them from the training thread only.
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <string>

namespace volt {

class Logger {
 public:
  virtual ~Logger() = default;

  /// Experiment name ("lightning_logs" by default) and version (the N of version_N).
  virtual std::string name() const = 0;
  virtual int64_t version() const = 0;
  /// Directory this logger writes into (<save_dir>/<name>/version_<N>); empty if it writes none.
  virtual std::string log_dir() const = 0;

  /// Records one set of scalar metrics at `step`.
  virtual void log_metrics(const std::map<std::string, double>& metrics, int64_t step) = 0;
  /// Records the hyper-parameters, and optionally initial values of the metrics they are compared by.
  virtual void log_hyperparams(const YAML::Node& hparams, const std::map<std::string, double>& metrics = {}) = 0;
  /// Records a piece of text under `tag` at `step`. Loggers without a text channel ignore it.
  virtual void log_text(const std::string& tag, const std::string& text, int64_t step) {}
  /// Stores the fully resolved run configuration (config.yaml). Default: nothing.
  virtual void save_config(const YAML::Node& config) {}
  /// Makes everything logged so far durable. Throws volt::Error when the write fails.
  virtual void flush() = 0;
  /// Called once at the end of a run with "success" or "failed"; flushes. Default: flush().
  virtual void finalize(const std::string& status) { flush(); }
};

}  // namespace volt
