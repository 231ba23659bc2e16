#pragma once
/// TensorBoard logger, as Lightning's TensorBoardLogger writes it: an event file
/// <save_dir>/<name>/version_N/events.out.tfevents.<time>.<host>.<pid>.<n> (TFRecord records of
/// TensorBoard's Event protocol buffers, see tfrecord_writer.h) holding
///   - first, an Event with file_version "brain.Event:2";
///   - log_metrics: one Event per metric, a Summary.Value with tag, simple_value (float32), step
///     and wall_time;
///   - log_hyperparams: the HParams plugin's three summaries (_hparams_/experiment,
///     _hparams_/session_start_info, _hparams_/session_end_info) as torch.utils.tensorboard writes
///     them, the metrics at step 0 (hp_metric = -1 by default, as Lightning), and hparams.yaml;
///   - log_text: the text plugin's summary (tag + "/text_summary", a DT_STRING tensor).
/// Records reach the file on flush(): when `flush_secs` seconds have passed since the last one (checked
/// as metrics are logged, as SummaryWriter's flush_secs), at every checkpoint save, at each epoch end
/// and when a run ends.
/// The Trainer creates its loggers on global rank 0 only. Not thread-safe.
#include <map>
#include <memory>
#include <string>

#include "volt/loggers/logger.h"
#include "volt/loggers/tfrecord_writer.h"

namespace volt {

class TensorBoardLogger : public Logger {
 public:
  /// Creates <save_dir>/<name>/version_N (the next free N, or `version` if >= 0) and a new event
  /// file in it. `default_hp_metric`: log_hyperparams without metrics logs hp_metric = -1 so the
  /// HParams dashboard lists the run (Lightning's default). `flush_secs`: the longest time events
  /// stay buffered while metrics are logged (0: every log_metrics). Throws ConfigError when the
  /// folder cannot be created, flush_secs < 0 or this build has no protobuf (see available()).
  explicit TensorBoardLogger(const std::string& save_dir, const std::string& name = "lightning_logs",
                             int64_t version = -1, bool default_hp_metric = true, double flush_secs = 120);
  ~TensorBoardLogger() override;

  /// Whether this build of volt can write event files (it was built with libprotobuf).
  static bool available();

  std::string name() const override { return name_; }
  int64_t version() const override { return version_; }
  std::string log_dir() const override { return log_dir_; }
  /// Path of the event file this logger writes.
  const std::string& event_file() const { return writer_->path(); }

  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override;
  /// Nested maps are flattened with "/" (a: {b: 1} -> a/b); numbers, booleans and strings keep their
  /// type, lists become their YAML text, nulls are left out (as Lightning sanitizes them).
  void log_hyperparams(const YAML::Node& hparams, const std::map<std::string, double>& metrics = {}) override;
  void log_text(const std::string& tag, const std::string& text, int64_t step) override;
  /// Writes config.yaml into log_dir().
  void save_config(const YAML::Node& config) override;
  /// Appends the buffered events to the file. Throws volt::Error naming the file when that fails
  /// (the events stay buffered).
  void flush() override;

 private:
  void write_event(const std::string& serialized_event);

  std::string name_;
  int64_t version_;
  std::string log_dir_;
  bool default_hp_metric_;
  double flush_secs_;
  double last_flush_ = 0;  // steady-clock seconds
  std::unique_ptr<detail::TFRecordWriter> writer_;
};

}  // namespace volt
