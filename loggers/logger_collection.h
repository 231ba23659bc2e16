#pragma once
/// Several loggers behind one Logger: every call goes to each of them, in order. The Trainer talks
/// to its loggers through one of these when it has more than one (Lightning's trainer.loggers).
/// Ownership: shares the loggers with whoever passed them. Not thread-safe.
#include <memory>
#include <vector>

#include "volt/loggers/logger.h"

namespace volt {

class LoggerCollection : public Logger {
 public:
  explicit LoggerCollection(std::vector<std::shared_ptr<Logger>> loggers);

  const std::vector<std::shared_ptr<Logger>>& loggers() const { return loggers_; }

  /// The loggers' names (and versions) joined with "_", the same value once when they all agree,
  /// as Lightning's LoggerCollection did.
  std::string name() const override;
  /// The first logger's version (-1 without loggers).
  int64_t version() const override;
  /// The first logger's folder ("" without loggers), as Lightning's trainer.log_dir.
  std::string log_dir() const override;

  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override;
  void log_hyperparams(const YAML::Node& hparams, const std::map<std::string, double>& metrics = {}) override;
  void log_text(const std::string& tag, const std::string& text, int64_t step) override;
  /// Once per distinct log_dir: loggers sharing a version folder share its config.yaml.
  void save_config(const YAML::Node& config) override;
  /// Flushes every logger even when one fails, then rethrows the first failure.
  void flush() override;
  /// Finalizes every logger even when one fails, then rethrows the first failure.
  void finalize(const std::string& status) override;

 private:
  std::vector<std::shared_ptr<Logger>> loggers_;
};

}  // namespace volt
