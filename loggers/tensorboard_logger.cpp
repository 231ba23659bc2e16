#include "volt/loggers/tensorboard_logger.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "volt/core/errors.h"
#include "volt/core/files.h"
#include "volt/loggers/version_dir.h"

// The generated classes exist when the build found libprotobuf and protoc (CMakeLists.txt).
#if __has_include("tensorboard/compat/proto/event.pb.h")
#define VOLT_TENSORBOARD_PROTOS 1
#include "tensorboard/compat/proto/event.pb.h"
#include "tensorboard/plugins/hparams/plugin_data.pb.h"
#include "tensorboard/plugins/text/plugin_data.pb.h"
#endif

namespace volt {

namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// events.out.tfevents.<10-digit seconds>.<host>.<pid>.<n>, as torch.utils.tensorboard names them;
// n is the first number free in `dir`.
std::unique_ptr<detail::TFRecordWriter> new_event_file(const std::string& dir) {
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) != 0) std::snprintf(host, sizeof(host), "localhost");
  char stem[128];
  std::snprintf(stem, sizeof(stem), "events.out.tfevents.%010lld.",
                static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(
                                           std::chrono::system_clock::now().time_since_epoch())
                                           .count()));
  const std::string base = dir + "/" + stem + host + "." + std::to_string(::getpid()) + ".";
  for (int n = 0;; ++n) {
    const std::string path = base + std::to_string(n);
    if (std::filesystem::exists(path)) continue;
    return std::make_unique<detail::TFRecordWriter>(path);
  }
}

void write_yaml(const std::string& path, const YAML::Node& node) {
  const std::string err = detail::write_file_atomic(path, YAML::Dump(node) + "\n");
  VOLT_CHECK(err.empty(), Error, err);
}

#ifdef VOLT_TENSORBOARD_PROTOS

// One hyper-parameter, typed as the HParams plugin types it.
struct HParam {
  enum Kind { Number, Bool, String } kind;
  double number = 0;
  bool flag = false;
  std::string text;
};

HParam hparam_of(const YAML::Node& n) {
  if (n.IsScalar()) {
    const std::string& s = n.Scalar();
    if (n.Tag() != "!") {  // an unquoted scalar: a number or a boolean when it reads as one
      if (s == "true" || s == "True" || s == "TRUE") return {HParam::Bool, 0, true, ""};
      if (s == "false" || s == "False" || s == "FALSE") return {HParam::Bool, 0, false, ""};
      char* end = nullptr;
      errno = 0;
      const double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end == s.c_str() + s.size() && errno == 0) return {HParam::Number, d, false, ""};
    }
    return {HParam::String, 0, false, s};
  }
  YAML::Emitter e;
  e << YAML::Flow << n;
  return {HParam::String, 0, false, e.c_str()};
}

void flatten(const YAML::Node& n, const std::string& prefix, std::map<std::string, HParam>& out) {
  if (n.IsMap()) {
    for (const auto& kv : n)
      flatten(kv.second, prefix.empty() ? kv.first.Scalar() : prefix + "/" + kv.first.Scalar(), out);
  } else if (n.IsDefined() && !n.IsNull() && !prefix.empty()) {
    out[prefix] = hparam_of(n);
  }
}

tensorboard::Event summary_event(int64_t step) {
  tensorboard::Event e;
  e.set_wall_time(now_seconds());
  e.set_step(step);
  return e;
}

// A Summary.Value carrying the HParams plugin's data (the tags torch.utils.tensorboard uses).
std::string hparams_event(const char* tag, const tensorboard::hparams::HParamsPluginData& data) {
  auto e = summary_event(0);
  auto* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  auto* plugin = v->mutable_metadata()->mutable_plugin_data();
  plugin->set_plugin_name("hparams");
  plugin->set_content(data.SerializeAsString());
  return e.SerializeAsString();
}

#endif

}  // namespace

bool TensorBoardLogger::available() {
#ifdef VOLT_TENSORBOARD_PROTOS
  return true;
#else
  return false;
#endif
}

TensorBoardLogger::TensorBoardLogger(const std::string& save_dir, const std::string& name, int64_t version,
                                     bool default_hp_metric, double flush_secs)
    : name_(name), version_(version), default_hp_metric_(default_hp_metric), flush_secs_(flush_secs) {
  VOLT_CHECK(flush_secs_ >= 0 && std::isfinite(flush_secs_), ConfigError,
             "TensorBoardLogger: flush_secs must be a number >= 0, got ", flush_secs_);
  VOLT_CHECK(available(), ConfigError,
             "the TensorBoard logger needs volt built with libprotobuf and protoc (Debian: libprotobuf-dev "
             "protobuf-compiler, see scripts/install-deps.sh); this build has neither: use logger: csv");
  log_dir_ = detail::make_version_dir(save_dir, name, version_);
  writer_ = new_event_file(log_dir_);
#ifdef VOLT_TENSORBOARD_PROTOS
  tensorboard::Event first;
  first.set_wall_time(now_seconds());
  first.set_file_version("brain.Event:2");
  write_event(first.SerializeAsString());
  flush();  // the file is recognizable as an event file from the start
#endif
}

TensorBoardLogger::~TensorBoardLogger() = default;  // the writer flushes what is pending

void TensorBoardLogger::write_event(const std::string& serialized_event) { writer_->write(serialized_event); }

void TensorBoardLogger::flush() {
  writer_->flush();
  last_flush_ = steady_seconds();
}

void TensorBoardLogger::save_config(const YAML::Node& config) { write_yaml(log_dir_ + "/config.yaml", config); }

#ifdef VOLT_TENSORBOARD_PROTOS

void TensorBoardLogger::log_metrics(const std::map<std::string, double>& metrics, int64_t step) {
  for (const auto& [tag, value] : metrics) {
    auto e = summary_event(step);
    auto* v = e.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
    write_event(e.SerializeAsString());
  }
  if (steady_seconds() - last_flush_ >= flush_secs_) flush();
}

void TensorBoardLogger::log_hyperparams(const YAML::Node& hparams, const std::map<std::string, double>& metrics) {
  write_yaml(log_dir_ + "/hparams.yaml", hparams);
  std::map<std::string, double> hp_metrics = metrics;
  if (hp_metrics.empty() && default_hp_metric_) hp_metrics["hp_metric"] = -1;
  if (hp_metrics.empty()) return;  // as Lightning: no metric to compare by, no HParams entry
  log_metrics(hp_metrics, 0);

  std::map<std::string, HParam> flat;
  if (hparams) flatten(hparams, "", flat);
  namespace hp = tensorboard::hparams;
  hp::HParamsPluginData experiment, start, end;
  auto* exp = experiment.mutable_experiment();
  auto* ssi = start.mutable_session_start_info();
  for (const auto& [key, h] : flat) {
    auto* info = exp->add_hparam_infos();
    info->set_name(key);
    auto& value = (*ssi->mutable_hparams())[key];
    switch (h.kind) {
      case HParam::Number:
        info->set_type(hp::DATA_TYPE_FLOAT64);
        value.set_number_value(h.number);
        break;
      case HParam::Bool:
        info->set_type(hp::DATA_TYPE_BOOL);
        value.set_bool_value(h.flag);
        break;
      case HParam::String:
        info->set_type(hp::DATA_TYPE_STRING);
        value.set_string_value(h.text);
        break;
    }
  }
  for (const auto& kv : hp_metrics) exp->add_metric_infos()->mutable_name()->set_tag(kv.first);
  end.mutable_session_end_info()->set_status(hp::STATUS_SUCCESS);
  write_event(hparams_event("_hparams_/experiment", experiment));
  write_event(hparams_event("_hparams_/session_start_info", start));
  write_event(hparams_event("_hparams_/session_end_info", end));
}

void TensorBoardLogger::log_text(const std::string& tag, const std::string& text, int64_t step) {
  auto e = summary_event(step);
  auto* v = e.mutable_summary()->add_value();
  v->set_tag(tag + "/text_summary");
  auto* plugin = v->mutable_metadata()->mutable_plugin_data();
  plugin->set_plugin_name("text");
  tensorboard::TextPluginData data;
  data.set_version(0);
  plugin->set_content(data.SerializeAsString());
  auto* t = v->mutable_tensor();
  t->set_dtype(tensorboard::DT_STRING);
  t->mutable_tensor_shape()->add_dim()->set_size(1);
  t->add_string_val(text);
  write_event(e.SerializeAsString());
}

#else  // no protobuf: the constructor has thrown, these are never reached

void TensorBoardLogger::log_metrics(const std::map<std::string, double>&, int64_t) {}
void TensorBoardLogger::log_hyperparams(const YAML::Node&, const std::map<std::string, double>&) {}
void TensorBoardLogger::log_text(const std::string&, const std::string&, int64_t) {}

#endif

}  // namespace volt
