#include "volt/loggers/csv_logger.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "volt/core/errors.h"
#include "volt/core/files.h"
#include "volt/loggers/version_dir.h"

namespace volt {

namespace {
/// A column name as Python's csv module writes it (QUOTE_MINIMAL, what Lightning's CSVLogger uses):
/// quoted, with quotes doubled, when it holds a comma, a quote or a line break.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}
}  // namespace

CSVLogger::CSVLogger(const std::string& root_dir, const std::string& name, int64_t version,
                     int64_t flush_logs_every_n_steps)
    : name_(name), version_(version), flush_every_(flush_logs_every_n_steps) {
  VOLT_CHECK(flush_every_ >= 1, ConfigError, "CSVLogger: flush_logs_every_n_steps must be >= 1, got ", flush_every_);
  log_dir_ = detail::make_version_dir(root_dir, name, version_);
}

void CSVLogger::log_metrics(const std::map<std::string, double>& metrics, int64_t step) {
  auto row = metrics;
  row["step"] = static_cast<double>(step);
  for (const auto& kv : row) {
    if (!std::binary_search(keys_.begin(), keys_.end(), kv.first)) {
      keys_.insert(std::upper_bound(keys_.begin(), keys_.end(), kv.first), kv.first);
      header_dirty_ = true;
    }
  }
  rows_.push_back(std::move(row));
  if ((step + 1) % flush_every_ == 0) flush();
}

void CSVLogger::flush() {
  const std::string path = log_dir_ + "/metrics.csv";
  auto format_row = [&](const std::map<std::string, double>& row) {
    std::ostringstream os;
    os << std::setprecision(10);
    for (size_t i = 0; i < keys_.size(); ++i) {
      if (i) os << ',';
      auto it = row.find(keys_[i]);
      if (it == row.end()) continue;
      const bool integral = (keys_[i] == "step" || keys_[i] == "epoch");
      if (integral)
        os << static_cast<int64_t>(it->second);
      else
        os << it->second;
    }
    return os.str();
  };
  if (header_dirty_) {
    // New columns: rewrite the whole file with the new header (Lightning does the same), through a
    // temporary file so a failed write (a full disk) leaves the previous metrics.csv whole.
    std::ostringstream text;
    for (size_t i = 0; i < keys_.size(); ++i) text << (i ? "," : "") << csv_field(keys_[i]);
    text << '\n';
    for (const auto& r : rows_) text << format_row(r) << '\n';
    const std::string err = detail::write_file_atomic(path, text.str());
    VOLT_CHECK(err.empty(), Error, "metrics log: ", err);
    header_dirty_ = false;
  } else {
    std::error_code ec;
    const auto before = std::filesystem::file_size(path, ec);
    std::ofstream out(path, std::ios::app);
    for (size_t i = rows_written_; i < rows_.size(); ++i) out << format_row(rows_[i]) << '\n';
    out.flush();
    if (!out.good()) {
      // Whole rows only: a cut-off last row would read as a row with a wrong value (or step).
      const int err = errno;
      out.close();
      if (!ec) std::filesystem::resize_file(path, before, ec);
      throw Error(detail::str_cat("appending to the metrics log '", path, "' failed: ", std::strerror(err),
                                  "; the rows before are kept"));
    }
  }
  rows_written_ = rows_.size();
}

void CSVLogger::log_hyperparams(const YAML::Node& hparams, const std::map<std::string, double>&) {
  const std::string err = detail::write_file_atomic(log_dir_ + "/hparams.yaml", YAML::Dump(hparams) + "\n");
  VOLT_CHECK(err.empty(), Error, err);
}

void CSVLogger::save_config(const YAML::Node& config) {
  const std::string err = detail::write_file_atomic(log_dir_ + "/config.yaml", YAML::Dump(config) + "\n");
  VOLT_CHECK(err.empty(), Error, err);
}

}  // namespace volt
