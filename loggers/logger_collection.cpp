#include "volt/loggers/logger_collection.h"

#include <exception>
#include <set>

#include "volt/core/errors.h"

namespace volt {

namespace {
// Calls f on every logger; the first exception is rethrown after all have been called, so one
// full disk does not keep the other loggers from saving what they hold.
template <class F>
void for_all(const std::vector<std::shared_ptr<Logger>>& loggers, F f) {
  std::exception_ptr first;
  for (const auto& l : loggers) {
    try {
      f(*l);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

std::string joined(const std::vector<std::string>& parts) {
  std::set<std::string> distinct(parts.begin(), parts.end());
  if (distinct.size() == 1) return parts.front();
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : "_") + p;
  return out;
}
}  // namespace

LoggerCollection::LoggerCollection(std::vector<std::shared_ptr<Logger>> loggers) : loggers_(std::move(loggers)) {
  for (size_t i = 0; i < loggers_.size(); ++i)
    VOLT_CHECK(loggers_[i] != nullptr, ConfigError, "LoggerCollection: logger ", i, " is null");
}

std::string LoggerCollection::name() const {
  std::vector<std::string> names;
  for (const auto& l : loggers_) names.push_back(l->name());
  return names.empty() ? std::string() : joined(names);
}

int64_t LoggerCollection::version() const { return loggers_.empty() ? -1 : loggers_.front()->version(); }

std::string LoggerCollection::log_dir() const { return loggers_.empty() ? std::string() : loggers_.front()->log_dir(); }

void LoggerCollection::log_metrics(const std::map<std::string, double>& metrics, int64_t step) {
  for_all(loggers_, [&](Logger& l) { l.log_metrics(metrics, step); });
}

void LoggerCollection::log_hyperparams(const YAML::Node& hparams, const std::map<std::string, double>& metrics) {
  for_all(loggers_, [&](Logger& l) { l.log_hyperparams(hparams, metrics); });
}

void LoggerCollection::log_text(const std::string& tag, const std::string& text, int64_t step) {
  for_all(loggers_, [&](Logger& l) { l.log_text(tag, text, step); });
}

void LoggerCollection::save_config(const YAML::Node& config) {
  std::set<std::string> done;
  for_all(loggers_, [&](Logger& l) {
    const std::string dir = l.log_dir();
    if (!dir.empty() && !done.insert(dir).second) return;
    l.save_config(config);
  });
}

void LoggerCollection::flush() {
  for_all(loggers_, [](Logger& l) { l.flush(); });
}

void LoggerCollection::finalize(const std::string& status) {
  for_all(loggers_, [&](Logger& l) { l.finalize(status); });
}

}  // namespace volt
