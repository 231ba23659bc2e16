#include "volt/loggers/logger_options.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>

#include "volt/core/errors.h"
#include "volt/loggers/csv_logger.h"
#include "volt/loggers/tensorboard_logger.h"
#include "volt/loggers/version_dir.h"

namespace volt {

namespace {
constexpr const char* kChoices =
    "valid: true (csv), false, csv, tensorboard, a list of these, or a list of "
    "{class_path: CSVLogger|TensorBoardLogger, init_args: {save_dir, name, version, ...}}";

bool is_bool_text(const std::string& s, bool& value) {
  static const std::map<std::string, bool> words = {{"true", true},   {"True", true},   {"TRUE", true},
                                                    {"false", false}, {"False", false}, {"FALSE", false}};
  auto it = words.find(s);
  if (it == words.end()) return false;
  value = it->second;
  return true;
}

LoggerConfig decode_entry(const YAML::Node& n, const std::string& key) {
  if (n.IsScalar()) {
    const std::string kind = normalize_logger_kind(n.Scalar());
    VOLT_CHECK(!kind.empty(), ConfigError, "config key '", key, "': unknown logger '", n.Scalar(), "'; ", kChoices);
    return LoggerConfig(kind);
  }
  if (!n.IsMap()) detail::type_error(key, "a logger name or {class_path, init_args}", n);
  for (const auto& kv : n) {
    const std::string k = kv.first.Scalar();
    VOLT_CHECK(k == "class_path" || k == "init_args", ConfigError, "unknown config key '", key, ".", k,
               "'; valid keys here: class_path, init_args");
  }
  VOLT_CHECK(n["class_path"], ConfigError, "config key '", key, "': a logger map needs class_path (CSVLogger or ",
             "TensorBoardLogger)");
  const std::string cp = detail::YamlCodec<std::string>::decode(n["class_path"], key + ".class_path");
  LoggerConfig c(normalize_logger_kind(cp));
  VOLT_CHECK(!c.kind.empty(), ConfigError, "config key '", key, ".class_path': unknown logger class '", cp,
             "'; valid: CSVLogger, TensorBoardLogger");
  const YAML::Node args = n["init_args"];
  if (args && !args.IsNull()) {
    if (!args.IsMap()) detail::type_error(key + ".init_args", "a map", args);
    YamlReader r(args, key + ".init_args");
    c.visit(r);
    r.finish();
  }
  return c;
}
}  // namespace

std::string normalize_logger_kind(const std::string& name) {
  std::string s = name.substr(name.rfind('.') == std::string::npos ? 0 : name.rfind('.') + 1);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return std::tolower(ch); });
  if (s.size() > 6 && s.compare(s.size() - 6, 6, "logger") == 0) s.resize(s.size() - 6);
  return s == "csv" || s == "tensorboard" ? s : std::string();
}

std::string LoggerConfig::class_name() const { return kind == "tensorboard" ? "TensorBoardLogger" : "CSVLogger"; }

LoggerOptions::LoggerOptions(bool enabled) {
  if (!enabled) loggers.clear();
}

void LoggerOptions::validate() {
  for (size_t i = 0; i < loggers.size(); ++i) {
    const std::string key = "trainer.logger[" + std::to_string(i) + "]";
    const std::string kind = normalize_logger_kind(loggers[i].kind);
    VOLT_CHECK(!kind.empty(), ConfigError, "config key '", key, "': unknown logger '", loggers[i].kind, "'; ",
               kChoices);
    loggers[i].kind = kind;
    VOLT_CHECK(!loggers[i].name.empty(), ConfigError, "config key '", key, ".init_args.name': must not be empty");
    VOLT_CHECK(!loggers[i].version || *loggers[i].version >= 0, ConfigError, "config key '", key,
               ".init_args.version': must be >= 0 or null, got ", loggers[i].version.value_or(0));
    VOLT_CHECK(loggers[i].flush_logs_every_n_steps >= 1, ConfigError, "config key '", key,
               ".init_args.flush_logs_every_n_steps': must be >= 1, got ", loggers[i].flush_logs_every_n_steps);
    VOLT_CHECK(loggers[i].flush_secs >= 0 && std::isfinite(loggers[i].flush_secs), ConfigError, "config key '", key,
               ".init_args.flush_secs': must be a number of seconds >= 0, got ", loggers[i].flush_secs);
    for (size_t j = 0; j < i; ++j) {
      const LoggerConfig &a = loggers[j], &b = loggers[i];
      VOLT_CHECK(!(a.kind == kind && a.save_dir == b.save_dir && a.name == b.name && a.version == b.version),
                 ConfigError, "config key '", key, "': a second ", b.class_name(), " with the same save_dir, name ",
                 "and version as trainer.logger[", j,
                 "] would write into the same folder (their files would collide); give one another name or "
                 "version, or remove it");
    }
    VOLT_CHECK(kind != "tensorboard" || TensorBoardLogger::available(), ConfigError, "config key '", key,
               "': this volt was built without libprotobuf, so it has no TensorBoard logger (Debian: "
               "libprotobuf-dev protobuf-compiler, see scripts/install-deps.sh); use csv");
  }
}

std::vector<std::shared_ptr<Logger>> create_loggers(const LoggerOptions& options, const std::string& default_root_dir) {
  std::vector<std::shared_ptr<Logger>> out;
  std::map<std::pair<std::string, std::string>, int64_t> shared;  // (save_dir, name) -> version
  for (const auto& c : options.loggers) {
    const std::string dir = c.save_dir.empty() ? default_root_dir : c.save_dir;
    int64_t version = c.version.value_or(-1);
    auto it = shared.find({dir, c.name});
    if (!c.version && it != shared.end()) version = it->second;
    std::shared_ptr<Logger> l;
    const std::string kind = normalize_logger_kind(c.kind);
    if (kind == "tensorboard")
      l = std::make_shared<TensorBoardLogger>(dir, c.name, version, c.default_hp_metric, c.flush_secs);
    else if (kind == "csv")
      l = std::make_shared<CSVLogger>(dir, c.name, version, c.flush_logs_every_n_steps);
    else
      VOLT_CHECK(false, ConfigError, "unknown logger '", c.kind, "'; ", kChoices);
    if (!c.version && it == shared.end()) shared[{dir, c.name}] = l->version();
    for (size_t j = 0; j < out.size(); ++j)
      VOLT_CHECK(out[j]->log_dir() != l->log_dir() || normalize_logger_kind(options.loggers[j].kind) != kind,
                 ConfigError, "config key 'trainer.logger[", out.size(), "]': a second ", c.class_name(),
                 " writing into '", l->log_dir(), "' as trainer.logger[", j,
                 "] does (their files would collide); give one another name or version, or remove it");
    out.push_back(std::move(l));
  }
  return out;
}

namespace detail {

LoggerOptions YamlCodec<LoggerOptions>::decode(const YAML::Node& n, const std::string& key) {
  if (!n || n.IsNull()) return LoggerOptions();  // Lightning: logger=None is the default logger
  if (n.IsScalar()) {
    bool on = false;
    if (normalize_logger_kind(n.Scalar()).empty() &&
        (is_bool_text(n.Scalar(), on) || YAML::convert<bool>::decode(n, on)))
      return LoggerOptions(on);
    return LoggerOptions(std::vector<LoggerConfig>{decode_entry(n, key)});
  }
  if (n.IsMap()) return LoggerOptions(std::vector<LoggerConfig>{decode_entry(n, key)});
  if (!n.IsSequence()) type_error(key, "true, false, a logger name or a list of loggers", n);
  std::vector<LoggerConfig> list;
  for (size_t i = 0; i < n.size(); ++i) list.push_back(decode_entry(n[i], key + "[" + std::to_string(i) + "]"));
  return LoggerOptions(std::move(list));
}

YAML::Node YamlCodec<LoggerOptions>::encode(const LoggerOptions& v) {
  if (v.loggers.empty()) return YAML::Node(false);
  const LoggerConfig d;
  const auto& only = v.loggers.front();
  if (v.loggers.size() == 1 && normalize_logger_kind(only.kind) == "csv" && only.save_dir == d.save_dir &&
      only.name == d.name && only.version == d.version && only.flush_logs_every_n_steps == d.flush_logs_every_n_steps)
    return YAML::Node(true);
  YAML::Node out(YAML::NodeType::Sequence);
  for (auto c : v.loggers) {
    const std::string kind = normalize_logger_kind(c.kind);
    if (!kind.empty()) c.kind = kind;
    YAML::Node entry(YAML::NodeType::Map);
    entry["class_path"] = c.class_name();
    YamlWriter w;
    c.visit(w);
    entry["init_args"] = w.node();
    out.push_back(entry);
  }
  return out;
}

}  // namespace detail
}  // namespace volt
