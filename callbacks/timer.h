#pragma once
/// Timer: tracks the time spent in training, validation, test and prediction and stops fit once
/// a duration is spent (Lightning's Timer; `trainer.max_time` adds one). The check runs after
/// every optimizer step (interval "step") or every training epoch ("epoch"); the ranks agree
/// (rank 0's clock decides), set trainer.should_stop, and fit ends as for any should_stop: the
/// epoch's end hooks run, so ModelCheckpoint's usual saves still happen. The time elapsed per
/// stage is saved in checkpoints, so a resumed fit continues counting from there.
///
/// Ownership: a callback (shared). Thread-safety: hooks run on the training thread.
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "volt/callbacks/callback.h"
#include "volt/core/options.h"
#include "volt/core/options_help.h"

namespace volt {

/// A length of time as Lightning's max_time takes it: "DD:HH:MM:SS" (e.g. "00:12:00:00") or a
/// map {weeks, days, hours, minutes, seconds, milliseconds} (Python's timedelta arguments).
struct Duration {
  double seconds = 0;
  Duration() = default;
  explicit Duration(double s) : seconds(s) {}
  Duration(const char* text);         // NOLINT: implicit, "DD:HH:MM:SS"
  Duration(const std::string& text);  // NOLINT
  /// "DD:HH:MM:SS" (whole seconds; fractions are kept by the map form).
  std::string str() const;
  /// Parses "DD:HH:MM:SS"; ConfigError naming `key` otherwise.
  static Duration parse(const std::string& text, const std::string& key = "max_time");
};

struct TimerOptions {
  std::optional<Duration> duration;  ///< none: only measures
  std::string interval = "step";     ///< "step" or "epoch": when the time is checked
  bool verbose = true;               ///< log when the limit is reached

  template <class V>
  void visit(V& v) {
    v("duration", duration)("interval", interval)("verbose", verbose);
  }
  void validate(const std::string& prefix = "Timer") const;
};

class Timer : public Callback {
 public:
  using Clock = std::function<double()>;  ///< seconds on a monotonic clock
  /// `clock` (tests): a fake monotonic clock; default steady_clock.
  explicit Timer(TimerOptions options = {}, Clock clock = {});
  std::string state_key() const override { return "Timer"; }

  /// Seconds spent in `stage` ("train", "validate", "test", "predict", "sanity_check"); for
  /// "train" the time restored from a checkpoint is included.
  double time_elapsed(const std::string& stage = "train") const;
  /// The duration minus time_elapsed(stage); nullopt without a duration.
  std::optional<double> time_remaining(const std::string& stage = "train") const;
  /// When `stage` started / ended on this Timer's clock (nullopt before).
  std::optional<double> start_time(const std::string& stage = "train") const;
  std::optional<double> end_time(const std::string& stage = "train") const;
  const TimerOptions& options() const { return options_; }

  void on_fit_start(Trainer&, LightningModule&) override;
  void on_train_start(Trainer&, LightningModule&) override;
  void on_train_end(Trainer&, LightningModule&) override;
  void on_validation_start(Trainer&, LightningModule&) override;
  void on_validation_end(Trainer&, LightningModule&) override;
  void on_predict_start(Trainer&, LightningModule&) override;
  void on_predict_end(Trainer&, LightningModule&) override;
  void on_train_batch_end(Trainer&, LightningModule&, const torch::Tensor&, const Batch&, int64_t) override;
  void on_train_epoch_end(Trainer&, LightningModule&) override;

  /// {time_elapsed: {train: s, validate: s, ...}} (Lightning's layout).
  YAML::Node state_dict() const override;
  void load_state_dict(const YAML::Node& state) override;

 private:
  double now() const { return clock_(); }
  void check_time_remaining(Trainer& trainer);

  TimerOptions options_;
  Clock clock_;
  std::map<std::string, double> start_, end_;
  double offset_ = 0;  // train seconds restored from a checkpoint
  std::string val_stage_ = "validate";
};

namespace detail {
template <>
struct YamlCodec<Duration> {
  static Duration decode(const YAML::Node& n, const std::string& key);
  static YAML::Node encode(const Duration& v);
};
template <>
struct HelpType<Duration> {
  static std::string name() { return "DD:HH:MM:SS|map"; }
};
}  // namespace detail

}  // namespace volt
