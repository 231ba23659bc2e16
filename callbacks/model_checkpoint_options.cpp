#include "volt/callbacks/model_checkpoint_options.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <regex>

#include "volt/core/errors.h"

namespace volt {

SaveLast::SaveLast(const char* text) : SaveLast(std::string(text)) {}

SaveLast::SaveLast(const std::string& text) : mode(Mode::link) {
  VOLT_CHECK(text == "link", ConfigError, "ModelCheckpoint.save_last: expected true, false or 'link', got '", text,
             "'");
}

TimeInterval TimeInterval::parse(const std::string& text, const std::string& key) {
  // Python's str(timedelta): "H:MM:SS[.ffffff]", after "D day, " or "D days, " from one day on.
  static const std::regex form(R"(^(?:([0-9]+) days?, )?([0-9]+):([0-5][0-9]):([0-5][0-9](?:\.[0-9]+)?)$)");
  std::smatch m;
  VOLT_CHECK(std::regex_match(text, m, form), ConfigError, "config key '", key, "': '", text,
             "' is not a time interval; give seconds (e.g. 3600) or H:MM:SS (e.g. 1:00:00, or '2 days, 0:00:00')");
  const double days = m[1].matched ? std::stod(m[1]) : 0.0;
  return TimeInterval(((days * 24 + std::stod(m[2])) * 60 + std::stod(m[3])) * 60 + std::stod(m[4]));
}

namespace detail {
SaveLast YamlCodec<SaveLast>::decode(const YAML::Node& n, const std::string& key) {
  bool on = false;
  if (n.IsNull()) return SaveLast(false);  // Lightning's default None
  if (n.IsScalar() && n.Scalar() == "link") return SaveLast(SaveLast::Mode::link);
  if (n.IsScalar() && YAML::convert<bool>::decode(n, on)) return SaveLast(on);
  type_error(key, "true, false or 'link'", n);
}

YAML::Node YamlCodec<SaveLast>::encode(const SaveLast& v) {
  return v.mode == SaveLast::Mode::link ? YAML::Node("link") : YAML::Node(static_cast<bool>(v));
}

TimeInterval YamlCodec<TimeInterval>::decode(const YAML::Node& n, const std::string& key) {
  if (n.IsScalar() && n.Scalar().find(':') != std::string::npos) return TimeInterval::parse(n.Scalar(), key);
  return TimeInterval(YamlCodec<double>::decode(n, key));
}
}  // namespace detail

namespace {
/// A field of a checkpoint filename: "{name}" or "{name:spec}".
const std::regex& filename_field() {
  static const std::regex field(R"(\{([A-Za-z0-9_/]+)(:[^}]*)?\})");
  return field;
}

// A name the file system refuses (a component over NAME_MAX, 255 bytes on Linux) would otherwise
// fail at the first save, after the first epoch. The shortest name the template can give: every
// field at 0 ("0" or "0.0000" by its spec), plus ".ckpt" and the longest suffix a save adds to the
// last component while it writes (".removed.partial", a sharded checkpoint being removed).
void check_name_lengths(const std::string& filename, bool auto_insert_metric_name) {
  constexpr size_t kNameMax = 255, kSuffixes = 5 + 16;
  std::map<std::string, double> zeros;
  for (auto it = std::sregex_iterator(filename.begin(), filename.end(), filename_field()); it != std::sregex_iterator();
       ++it)
    zeros[(*it)[1]] = 0.0;
  const std::string shortest = detail::format_checkpoint_name(filename, auto_insert_metric_name, 0, 0, zeros);
  size_t start = 0;
  while (start <= shortest.size()) {
    const size_t slash = std::min(shortest.find('/', start), shortest.size());
    const bool last = slash == shortest.size();
    const size_t length = slash - start + (last ? kSuffixes : 0);
    VOLT_CHECK(length <= kNameMax, ConfigError, "ModelCheckpoint.filename: its names have at least ", slash - start,
               " bytes in ", last ? "their last part" : "a folder part", " ('", shortest.substr(start, slash - start),
               "'), more than the ", last ? kNameMax - kSuffixes : kNameMax,
               " a file system takes there with the suffixes a save adds; shorten it");
    start = slash + 1;
  }
}
}  // namespace

void ModelCheckpointOptions::validate() const {
  VOLT_CHECK(!filename.empty(), ConfigError,
             "ModelCheckpoint.filename: must not be empty (it would write hidden '.ckpt' files); leave it at "
             "'{epoch}-{step}' or name the checkpoints");
  detail::check_checkpoint_filename(filename);
  check_name_lengths(filename, auto_insert_metric_name);
  VOLT_CHECK(mode == "min" || mode == "max", ConfigError, "ModelCheckpoint.mode: expected 'min' or 'max', got '", mode,
             "'");
  VOLT_CHECK(save_top_k >= -1, ConfigError, "ModelCheckpoint.save_top_k: must be >= -1, got ", save_top_k);
  VOLT_CHECK(every_n_train_steps >= 0 && every_n_epochs >= 0, ConfigError,
             "ModelCheckpoint: every_n_train_steps and every_n_epochs must be >= 0");
  VOLT_CHECK(train_time_interval.seconds >= 0 && std::isfinite(train_time_interval.seconds), ConfigError,
             "ModelCheckpoint.train_time_interval: must be a number of seconds >= 0 (0: off), got ",
             train_time_interval.seconds);
  VOLT_CHECK(!(every_n_train_steps > 0 && train_time_interval.seconds > 0), ConfigError,
             "ModelCheckpoint: every_n_train_steps and train_time_interval are mutually exclusive (as in Lightning); "
             "set one of them");
  // every_n_epochs' default (1) gives way to the other triggers; any other value would be ignored.
  VOLT_CHECK(every_n_epochs <= 1 || (every_n_train_steps == 0 && train_time_interval.seconds == 0), ConfigError,
             "ModelCheckpoint: every_n_epochs=", every_n_epochs, " and ",
             every_n_train_steps > 0 ? "every_n_train_steps" : "train_time_interval",
             " are mutually exclusive (as in Lightning); set one of them");
  VOLT_CHECK(!(save_top_k > 1 && monitor.empty()), ConfigError, "ModelCheckpoint: save_top_k=", save_top_k,
             " needs a monitor to rank checkpoints");
}

namespace detail {

namespace {

/// Python's format spec for numbers, the subset filenames use: [0][width][.precision][type], type one
/// of d f e E g G (e.g. "02d", ".2f", "8.3e"). Returns the printf conversion for a double ("" if
/// `spec` is not of that form). Integers ("d", or no type for epoch and step) print without decimals.
std::string printf_spec(const std::string& spec, bool integer) {
  static const std::regex form(R"(^(0?)([0-9]{0,3})(\.[0-9]{1,2})?([dfeEgG]?)$)");
  std::smatch m;
  if (!std::regex_match(spec, m, form)) return {};
  std::string type = m[4];
  if (type.empty()) type = integer ? "d" : (m[3].matched ? "f" : "");
  if (type == "d") return m[3].matched ? std::string() : "%" + std::string(m[1]) + std::string(m[2]) + ".0f";
  if (type.empty()) return "%" + std::string(m[1]) + std::string(m[2]) + ".4f";
  return "%" + std::string(m[1]) + std::string(m[2]) + std::string(m[3]) + type;
}
}  // namespace

void check_checkpoint_filename(const std::string& filename) {
  // Subfolders are fine ("{epoch}/{step}"); leaving the checkpoint folder is not: ModelCheckpoint
  // would write where it never prunes or locks.
  VOLT_CHECK(filename.front() != '/', ConfigError, "ModelCheckpoint.filename: '", filename,
             "' is an absolute path; give the folder as dirpath and a name relative to it as filename");
  for (size_t start = 0; start <= filename.size();) {
    const size_t slash = std::min(filename.find('/', start), filename.size());
    VOLT_CHECK(filename.compare(start, slash - start, "..") != 0, ConfigError, "ModelCheckpoint.filename: '", filename,
               "' leads out of the checkpoint folder ('..'); give the folder as dirpath instead");
    start = slash + 1;
  }
  for (auto it = std::sregex_iterator(filename.begin(), filename.end(), filename_field()); it != std::sregex_iterator();
       ++it) {
    const std::string key = (*it)[1];
    if (!(*it)[2].matched) continue;
    const std::string spec = std::string((*it)[2]).substr(1);
    VOLT_CHECK(!printf_spec(spec, key == "epoch" || key == "step").empty(), ConfigError,
               "ModelCheckpoint.filename: unsupported format spec '", spec, "' for '", key,
               "'; use [0][width][.precision][type] with type d, f, e or g (e.g. {epoch:02d}, {val_loss:.2f})");
  }
}

std::string format_checkpoint_name(const std::string& filename, bool auto_insert_metric_name, int64_t epoch,
                                   int64_t step, const std::map<std::string, double>& metrics) {
  // "{epoch}-{step}-{val_loss:.2f}" -> "epoch=3-step=120-val_loss=0.53", as Lightning.
  std::string out;
  size_t last = 0;
  for (auto it = std::sregex_iterator(filename.begin(), filename.end(), filename_field()); it != std::sregex_iterator();
       ++it) {
    out += filename.substr(last, it->position() - last);
    const std::string key = (*it)[1];
    const std::string spec = (*it)[2].matched ? std::string((*it)[2]).substr(1) : std::string();
    const bool integer = key == "epoch" || key == "step";
    double v = NAN;
    if (integer) {
      v = static_cast<double>(key == "epoch" ? epoch : step);
    } else {
      auto m = metrics.find(key);
      if (m != metrics.end()) v = m->second;
    }
    // The spec was checked at construction (check_checkpoint_filename): only numeric conversions.
    const std::string f = spec.empty() ? (integer ? "%.0f" : "%.4f") : printf_spec(spec, integer);
    char buf[64];
    std::snprintf(buf, sizeof buf, f.c_str(), v);
    out += (auto_insert_metric_name ? key + "=" : std::string()) + buf;
    last = it->position() + it->length();
  }
  out += filename.substr(last);
  return out;
}

}  // namespace detail

}  // namespace volt
