#pragma once
/// CSV logger, as Lightning's CSVLogger writes it: <root>/lightning_logs/version_N/metrics.csv with a
/// sorted header that grows (the file is rewritten) when new metric names appear, plus hparams.yaml
/// and the resolved config.yaml. Rows reach metrics.csv every `flush_logs_every_n_steps` steps
/// (as Lightning: when (step + 1) is a multiple of it), at every checkpoint save, at each epoch end
/// and when the run ends. The Trainer creates its loggers on global rank 0 only. Not thread-safe.
#include <yaml-cpp/yaml.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "volt/loggers/logger.h"

namespace volt {

class CSVLogger : public Logger {
 public:
  /// Creates root_dir/name/version_N now: the next free N, or `version` if >= 0 (with a warning when
  /// that folder already holds an earlier run's metrics.csv, hparams.yaml or config.yaml: they are
  /// replaced, as Lightning warns). Throws ConfigError when the folder cannot be created or
  /// `flush_logs_every_n_steps` < 1.
  explicit CSVLogger(const std::string& root_dir, const std::string& name = "lightning_logs", int64_t version = -1,
                     int64_t flush_logs_every_n_steps = 100);
  std::string name() const override { return name_; }
  std::string log_dir() const override { return log_dir_; }
  int64_t version() const override { return version_; }

  /// Buffers one row: `metrics` plus "step" (and "epoch" if present in metrics); flushes when
  /// (step + 1) is a multiple of flush_logs_every_n_steps.
  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override;
  /// Writes hparams.yaml (`metrics` are not stored: Lightning's CSVLogger keeps only the hparams).
  void log_hyperparams(const YAML::Node& hparams, const std::map<std::string, double>& metrics = {}) override;
  void save_config(const YAML::Node& config) override;
  /// Writes the buffered rows to metrics.csv. Throws volt::Error naming the file when that fails.
  void flush() override;

 private:
  std::string name_;
  std::string log_dir_;
  int64_t version_;
  int64_t flush_every_;
  std::vector<std::map<std::string, double>> rows_;
  std::vector<std::string> keys_;  // sorted
  size_t rows_written_ = 0;
  bool header_dirty_ = true;
};

}  // namespace volt
