#pragma once
/// ModelCheckpoint's options, with Lightning's names and defaults, and the value types of two of
/// them (save_last, train_time_interval) with their YAML forms.
#include <cstdint>
#include <optional>
#include <string>

#include "volt/core/options.h"
#include "volt/core/options_help.h"

namespace volt {

/// ModelCheckpoint.save_last, as Lightning's `Optional[Literal[True, False, "link"]]`: off, a copy
/// of the newest state as last.ckpt, or last.ckpt as a symbolic link to the newest checkpoint saved.
/// YAML: true, false (or null) or "link". Value type.
struct SaveLast {
  enum class Mode { off, copy, link };
  Mode mode = Mode::off;
  SaveLast(bool on = false) : mode(on ? Mode::copy : Mode::off) {}  // NOLINT: implicit, as Lightning's bool
  SaveLast(Mode m) : mode(m) {}                                     // NOLINT
  /// "link" only (a string literal would otherwise convert to `true`); ConfigError otherwise.
  SaveLast(const char* text);         // NOLINT
  SaveLast(const std::string& text);  // NOLINT
  explicit operator bool() const { return mode != Mode::off; }
  bool operator==(const SaveLast& o) const { return mode == o.mode; }
  bool operator!=(const SaveLast& o) const { return mode != o.mode; }
};

/// ModelCheckpoint.train_time_interval in seconds (0: off). YAML: a number of seconds or Python's
/// timedelta text, "H:MM:SS" or "D day(s), H:MM:SS" (fractional seconds allowed), as a Lightning
/// config gives a `timedelta`. Converts to and from double. Value type.
struct TimeInterval {
  double seconds = 0;
  TimeInterval(double s = 0) : seconds(s) {}   // NOLINT: implicit, a number of seconds
  operator double() const { return seconds; }  // NOLINT
  /// Parses "H:MM:SS" or "D day(s), H:MM:SS"; ConfigError naming `key` otherwise.
  static TimeInterval parse(const std::string& text, const std::string& key);
};

namespace detail {
template <>
struct YamlCodec<SaveLast> {
  static SaveLast decode(const YAML::Node& n, const std::string& key);
  static YAML::Node encode(const SaveLast& v);
};
template <>
struct HelpType<SaveLast> {
  static std::string name() { return "bool|link"; }
};
template <>
struct YamlCodec<TimeInterval> {
  static TimeInterval decode(const YAML::Node& n, const std::string& key);
  static YAML::Node encode(const TimeInterval& v) { return YAML::Node(v.seconds); }
};
template <>
struct HelpType<TimeInterval> {
  static std::string name() { return "float|H:MM:SS"; }
};
}  // namespace detail

struct ModelCheckpointOptions {
  std::string dirpath;  // "" = <default_root_dir>/checkpoints
  std::string filename = "{epoch}-{step}";
  std::string monitor;  // "" = keep the latest
  std::string mode = "min";
  int64_t save_top_k = 1;  // -1 = all, 0 = none (but last)
  SaveLast save_last = false;
  /// "{epoch}-{val_loss:.2f}" names "epoch=3-val_loss=0.12" (true) or "3-0.12" (false).
  bool auto_insert_metric_name = true;
  int64_t every_n_train_steps = 0;
  int64_t every_n_epochs = 1;  // 1 gives way to every_n_train_steps or train_time_interval; more is refused beside them
  TimeInterval train_time_interval = 0;  // seconds; 0 = off
  bool save_weights_only = false;
  /// Save (top k and last) at the training epoch's end (true) or after validation (false). Unset:
  /// at the training epoch's end without a validation loop, else after validation unless
  /// validation runs once at the end of every epoch (check_val_every_n_epoch 1, val_check_interval 1.0).
  std::optional<bool> save_on_train_epoch_end;
  /// A name already on disk gets "-v1", "-v2", ... (true) or is overwritten (false).
  bool enable_version_counter = true;

  template <class V>
  void visit(V& v) {
    v("dirpath", dirpath)("filename", filename)("monitor", monitor)("mode", mode)("save_top_k", save_top_k)(
        "save_last", save_last)("auto_insert_metric_name", auto_insert_metric_name)(
        "every_n_train_steps", every_n_train_steps)("every_n_epochs", every_n_epochs)(
        "train_time_interval", train_time_interval)("save_weights_only", save_weights_only)(
        "save_on_train_epoch_end", save_on_train_epoch_end)("enable_version_counter", enable_version_counter);
  }
  void validate() const;
};

namespace detail {
/// Checks every `{key:spec}` of a ModelCheckpoint filename: the spec must be a numeric format
/// ([0][width][.precision][d|f|e|g]); ConfigError naming the field otherwise.
void check_checkpoint_filename(const std::string& filename);
/// `filename` with its fields filled in: "{epoch}-{step}-{val_loss:.2f}" ->
/// "epoch=3-step=120-val_loss=0.53" (or "3-120-0.53" without auto_insert_metric_name). A metric not
/// in `metrics` prints as nan. The specs must have passed check_checkpoint_filename.
std::string format_checkpoint_name(const std::string& filename, bool auto_insert_metric_name, int64_t epoch,
                                   int64_t step, const std::map<std::string, double>& metrics);
}  // namespace detail

}  // namespace volt
