#include "volt/callbacks/timer.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <sstream>

#include "volt/core/errors.h"
#include "volt/trainer/trainer.h"

namespace volt {

namespace {
constexpr double kMaxDurationSeconds = 999999999.0 * 86400;  // Python's timedelta.max
}  // namespace

Duration::Duration(const char* text) : Duration(parse(text)) {}
Duration::Duration(const std::string& text) : Duration(parse(text)) {}

Duration Duration::parse(const std::string& text, const std::string& key) {
  int d = 0, h = 0, m = 0, s = 0;
  char tail = 0;
  const int n = std::sscanf(text.c_str(), "%d:%d:%d:%d%c", &d, &h, &m, &s, &tail);
  // "%d" reads "-00" as 0: a sign anywhere would turn "-00:00:00:05" into 5 seconds.
  VOLT_CHECK(n == 4 && d >= 0 && h >= 0 && m >= 0 && s >= 0 && text.find_first_of("+-") == std::string::npos,
             ConfigError, "config key '", key, "': '", text,
             "' is not a duration; write DD:HH:MM:SS (e.g. 00:12:00:00 for 12 hours) or a map {days, hours, "
             "minutes, seconds}");
  return Duration(((d * 24.0 + h) * 60.0 + m) * 60.0 + s);
}

std::string Duration::str() const {
  int64_t t = static_cast<int64_t>(std::floor(seconds));
  char buf[48];
  std::snprintf(buf, sizeof buf, "%02lld:%02lld:%02lld:%02lld", static_cast<long long>(t / 86400),
                static_cast<long long>(t / 3600 % 24), static_cast<long long>(t / 60 % 60),
                static_cast<long long>(t % 60));
  return buf;
}

void TimerOptions::validate(const std::string& prefix) const {
  VOLT_CHECK(interval == "step" || interval == "epoch", ConfigError, "config key '", prefix,
             ".interval': expected 'step' or 'epoch', got '", interval, "'");
  VOLT_CHECK(!duration || duration->seconds >= 0, ConfigError, "config key '", prefix,
             ".duration': must not be negative");
  VOLT_CHECK(!duration || duration->seconds <= kMaxDurationSeconds, ConfigError, "config key '", prefix,
             ".duration': ", duration->seconds, " seconds is longer than any run (at most 999999999 days)");
}

Timer::Timer(TimerOptions options, Clock clock) : options_(std::move(options)), clock_(std::move(clock)) {
  options_.validate();
  if (!clock_)
    clock_ = [] { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); };
}

std::optional<double> Timer::start_time(const std::string& stage) const {
  auto it = start_.find(stage);
  return it == start_.end() ? std::nullopt : std::optional<double>(it->second);
}

std::optional<double> Timer::end_time(const std::string& stage) const {
  auto it = end_.find(stage);
  return it == end_.end() ? std::nullopt : std::optional<double>(it->second);
}

double Timer::time_elapsed(const std::string& stage) const {
  const double offset = stage == "train" ? offset_ : 0.0;
  const auto start = start_time(stage), end = end_time(stage);
  if (!start) return offset;
  if (!end) return now() - *start + offset;
  return *end - *start + offset;
}

std::optional<double> Timer::time_remaining(const std::string& stage) const {
  if (!options_.duration) return std::nullopt;
  return options_.duration->seconds - time_elapsed(stage);
}

void Timer::on_train_start(Trainer&, LightningModule&) {
  start_["train"] = now();
  end_.erase("train");
}
void Timer::on_train_end(Trainer&, LightningModule&) { end_["train"] = now(); }

void Timer::on_validation_start(Trainer& t, LightningModule&) {
  val_stage_ = t.sanity_checking() ? "sanity_check" : "validate";
  start_[val_stage_] = now();
  end_.erase(val_stage_);
}
void Timer::on_validation_end(Trainer&, LightningModule&) { end_[val_stage_] = now(); }
void Timer::on_predict_start(Trainer&, LightningModule&) {
  start_["predict"] = now();
  end_.erase("predict");
}
void Timer::on_predict_end(Trainer&, LightningModule&) { end_["predict"] = now(); }

void Timer::on_fit_start(Trainer& t, LightningModule&) {
  // A state restored from a checkpoint may already be past the duration.
  if (options_.duration) check_time_remaining(t);
}

void Timer::on_train_batch_end(Trainer& t, LightningModule&, const torch::Tensor&, const Batch&, int64_t) {
  if (options_.duration && options_.interval == "step") check_time_remaining(t);
}

void Timer::on_train_epoch_end(Trainer& t, LightningModule&) {
  if (options_.duration && options_.interval == "epoch") check_time_remaining(t);
}

void Timer::check_time_remaining(Trainer& t) {
  bool stop = time_elapsed("train") >= options_.duration->seconds;
  // Rank 0's clock decides for all: the ranks stop at the same step.
  if (t.world_size() > 1)
    stop = t.strategy().broadcast(torch::tensor({stop ? 1.0 : 0.0}, torch::kDouble), 0).item<double>() > 0.5;
  if (stop && !t.should_stop && options_.verbose)
    spdlog::info("Time limit reached. Elapsed time is {}. Signaling Trainer to stop.",
                 Duration(time_elapsed("train")).str());
  t.should_stop = t.should_stop || stop;
}

YAML::Node Timer::state_dict() const {
  YAML::Node n(YAML::NodeType::Map);
  YAML::Node e(YAML::NodeType::Map);
  for (const char* s : {"train", "sanity_check", "validate", "test", "predict"}) e[s] = time_elapsed(s);
  n["time_elapsed"] = e;
  return n;
}

void Timer::load_state_dict(const YAML::Node& state) {
  if (state && state["time_elapsed"] && state["time_elapsed"]["train"])
    offset_ = state["time_elapsed"]["train"].as<double>();
}

namespace detail {

Duration YamlCodec<Duration>::decode(const YAML::Node& n, const std::string& key) {
  if (n.IsScalar()) return Duration::parse(n.Scalar(), key);
  if (!n.IsMap()) type_error(key, "DD:HH:MM:SS or a map {days, hours, minutes, seconds}", n);
  static const std::pair<const char*, double> units[] = {{"weeks", 604800.0}, {"days", 86400.0},
                                                         {"hours", 3600.0},   {"minutes", 60.0},
                                                         {"seconds", 1.0},    {"milliseconds", 1e-3}};
  double total = 0;
  for (const auto& kv : n) {
    const std::string k = kv.first.Scalar();
    bool known = false;
    for (const auto& [name, scale] : units)
      if (k == name) {
        total += scale * YamlCodec<double>::decode(kv.second, join_key(key, k));
        known = true;
      }
    VOLT_CHECK(known, ConfigError, "unknown config key '", join_key(key, k),
               "'; valid: weeks, days, hours, minutes, seconds, milliseconds");
  }
  VOLT_CHECK(total >= 0, ConfigError, "config key '", key, "': the duration must not be negative");
  VOLT_CHECK(total <= kMaxDurationSeconds, ConfigError, "config key '", key, "': ", total,
             " seconds is longer than any run (at most 999999999 days, Python's timedelta.max)");
  return Duration(total);
}

YAML::Node YamlCodec<Duration>::encode(const Duration& v) {
  if (v.seconds == std::floor(v.seconds)) return YAML::Node(v.str());
  YAML::Node n(YAML::NodeType::Map);
  n["seconds"] = v.seconds;
  return n;
}

}  // namespace detail
}  // namespace volt
