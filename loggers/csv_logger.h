#pragma once
/// CSV logger, as Lightning's CSVLogger writes it: <root>/lightning_logs/version_N/metrics.csv with a
/// sorted header that grows (the file is rewritten) when new metric names appear, plus hparams.yaml
/// and the resolved config.yaml. Only rank 0 creates one. Not thread-safe.
#include <yaml-cpp/yaml.h>

#include <map>
#include <set>
#include <string>
#include <vector>

namespace volt {

class CSVLogger {
 public:
  /// Picks the next free version_N under root_dir/name (or uses `version` if >= 0).
  CSVLogger(const std::string& root_dir, const std::string& name = "lightning_logs", int64_t version = -1);
  const std::string& log_dir() const { return log_dir_; }
  int64_t version() const { return version_; }

  /// Appends one row: `metrics` plus "step" (and "epoch" if present in metrics).
  void log_metrics(const std::map<std::string, double>& metrics, int64_t step);
  void log_hyperparams(const YAML::Node& hparams);
  void save_config(const YAML::Node& config);
  /// Writes the buffered rows to metrics.csv.
  void flush();

 private:
  std::string log_dir_;
  int64_t version_;
  std::vector<std::map<std::string, double>> rows_;
  std::vector<std::string> keys_;  // sorted
  size_t rows_written_ = 0;
  bool header_dirty_ = true;
};

}  // namespace volt
