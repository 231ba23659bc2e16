#include "volt/callbacks/model_checkpoint.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <regex>

#include "volt/core/files.h"
#include "volt/trainer/trainer.h"

namespace volt {

namespace fs = std::filesystem;

namespace {
// Every rank must take the same saving decisions, or some would enter the collective save (a
// barrier; FSDP gathers) and the others not. As Lightning broadcasts rank 0's checkpoint path,
// rank 0's view of the monitored metric decides for all: a metric logged without sync_dist may
// differ between ranks.

/// Rank 0's `x` on every rank.
double from_rank0(Trainer& t, double x) {
  if (t.world_size() == 1) return x;
  return t.strategy().broadcast(torch::tensor({x}, torch::kDouble), 0).item<double>();
}

/// Rank 0's `s` on every rank.
std::string from_rank0(Trainer& t, const std::string& s) {
  if (t.world_size() == 1) return s;
  const auto n = static_cast<int64_t>(from_rank0(t, static_cast<double>(s.size())));
  if (n == 0) return {};
  torch::Tensor bytes = torch::zeros({n}, torch::kUInt8);
  if (t.is_global_zero()) std::memcpy(bytes.data_ptr<uint8_t>(), s.data(), static_cast<size_t>(n));
  bytes = t.strategy().broadcast(bytes, 0);
  return std::string(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()), static_cast<size_t>(n));
}

/// Whether rank 0 has `monitor` in its callback metrics, and its value there.
std::pair<bool, double> monitored_on_rank0(Trainer& t, const std::string& monitor) {
  auto m = t.callback_metrics().find(monitor);
  const bool has = m != t.callback_metrics().end();
  if (t.world_size() == 1) return {has, has ? m->second : NAN};
  auto v = t.strategy().broadcast(torch::tensor({has ? 1.0 : 0.0, has ? m->second : 0.0}, torch::kDouble), 0);
  return {v[0].item<double>() > 0.5, v[1].item<double>()};
}
}  // namespace

void ModelCheckpointOptions::validate() const {
  VOLT_CHECK(!filename.empty(), ConfigError,
             "ModelCheckpoint.filename: must not be empty (it would write hidden '.ckpt' files); leave it at "
             "'{epoch}-{step}' or name the checkpoints");
  detail::check_checkpoint_filename(filename);
  VOLT_CHECK(mode == "min" || mode == "max", ConfigError, "ModelCheckpoint.mode: expected 'min' or 'max', got '", mode,
             "'");
  VOLT_CHECK(save_top_k >= -1, ConfigError, "ModelCheckpoint.save_top_k: must be >= -1, got ", save_top_k);
  VOLT_CHECK(every_n_train_steps >= 0 && every_n_epochs >= 0, ConfigError,
             "ModelCheckpoint: every_n_train_steps and every_n_epochs must be >= 0");
  VOLT_CHECK(train_time_interval >= 0 && std::isfinite(train_time_interval), ConfigError,
             "ModelCheckpoint.train_time_interval: must be a number of seconds >= 0 (0: off), got ",
             train_time_interval);
  VOLT_CHECK(!(every_n_train_steps > 0 && train_time_interval > 0), ConfigError,
             "ModelCheckpoint: every_n_train_steps and train_time_interval are mutually exclusive (as in Lightning); "
             "set one of them");
  VOLT_CHECK(!(save_top_k > 1 && monitor.empty()), ConfigError, "ModelCheckpoint: save_top_k=", save_top_k,
             " needs a monitor to rank checkpoints");
}

ModelCheckpoint::ModelCheckpoint(ModelCheckpointOptions options) : options_(std::move(options)) { options_.validate(); }

std::string ModelCheckpoint::dir(const Trainer& t) const {
  return options_.dirpath.empty() ? (fs::path(t.options().default_root_dir) / "checkpoints").string()
                                  : options_.dirpath;
}

std::string ModelCheckpoint::last_model_path_on_disk(const Trainer& t) const {
  const std::string p = (fs::path(dir(t)) / "last.ckpt").string();
  return fs::exists(p) ? p : std::string();
}

namespace {
/// "<name>.tmp.<pid>" of a process that no longer runs: what an interrupted atomic write left.
bool stale_temp(const std::string& name) {
  const auto at = name.rfind(".tmp.");
  if (at == std::string::npos) return false;
  const std::string pid = name.substr(at + 5);
  if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) return false;
  return ::kill(static_cast<pid_t>(std::stoll(pid)), 0) != 0 && errno == ESRCH;
}

/// The checkpoint folders this process has locked, by canonical path: the ModelCheckpoints of one
/// Trainer share a folder's lock (flock excludes a second descriptor even in the same process).
std::mutex folder_locks_mutex;
std::map<std::string, std::weak_ptr<ModelCheckpoint::FolderLock>> folder_locks;

/// Rank 0's part of setup: lock, clean, warn. Returns "" or the reason the run cannot use `d`.
std::string prepare_dir(const std::string& d, const Trainer* owner,
                        std::shared_ptr<ModelCheckpoint::FolderLock>& lock) {
  std::error_code ec;
  fs::create_directories(d, ec);
  if (ec) return "cannot create the checkpoint folder '" + d + "': " + ec.message();
  std::lock_guard<std::mutex> guard(folder_locks_mutex);
  const std::string key = fs::weakly_canonical(d, ec).string();
  if (auto held = folder_locks[key].lock()) {
    if (held->owner != owner)
      return "another Trainer of this process is writing checkpoints to '" + d +
             "'; give this run its own trainer.default_root_dir (or ModelCheckpoint.dirpath)";
    lock = held;  // another ModelCheckpoint of this run: the folder is already prepared
    return {};
  }
  auto fresh = std::make_shared<ModelCheckpoint::FolderLock>();
  fresh->owner = owner;
  const std::string held = fresh->lock.try_lock(d);
  if (!held.empty())
    return "another run is writing checkpoints to '" + d + "' (its lock is " + held +
           "); give this run its own trainer.default_root_dir (or ModelCheckpoint.dirpath)";
  folder_locks[key] = fresh;
  lock = std::move(fresh);
  bool earlier = false;
  for (const auto& e : fs::directory_iterator(d, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() > 8 && name.compare(name.size() - 8, 8, ".partial") == 0) {
      spdlog::warn("Removing '{}': an interrupted save left it (the checkpoint it was replacing is intact)",
                   e.path().string());
      detail::remove_tree(e.path().string());
    } else if (stale_temp(name)) {
      spdlog::warn("Removing '{}': an interrupted save left it", e.path().string());
      detail::remove_tree(e.path().string());
    } else if (name.size() > 5 && name.compare(name.size() - 5, 5, ".ckpt") == 0) {
      earlier = true;
    }
  }
  if (earlier)
    spdlog::warn(
        "Checkpoint folder '{}' already holds checkpoints of an earlier run; this run replaces those of the "
        "same name (last.ckpt among them)",
        d);
  return {};
}
}  // namespace

void ModelCheckpoint::setup(Trainer& t, LightningModule&, const std::string& stage) {
  last_time_save_ = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  validated_ = false;
  if (stage != "fit") return;
  // Rank 0 decides; every rank learns the outcome, so all fail together rather than some waiting.
  const std::string error = from_rank0(t, t.is_global_zero() ? prepare_dir(dir(t), &t, lock_) : std::string());
  VOLT_CHECK(error.empty(), CheckpointError, error);
}

void ModelCheckpoint::teardown(Trainer&, LightningModule&, const std::string&) { lock_.reset(); }

void ModelCheckpoint::on_exception(Trainer&, LightningModule&, const std::exception&) { lock_.reset(); }

namespace {
const std::regex& filename_field() {
  static const std::regex field(R"(\{([A-Za-z0-9_/]+)(:[^}]*)?\})");
  return field;
}

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

void detail::check_checkpoint_filename(const std::string& filename) {
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

std::string ModelCheckpoint::format_name(const Trainer& t) const {
  // "{epoch}-{step}-{val_loss:.2f}" -> "epoch=3-step=120-val_loss=0.53", as Lightning.
  std::string out;
  size_t last = 0;
  for (auto it = std::sregex_iterator(options_.filename.begin(), options_.filename.end(), filename_field());
       it != std::sregex_iterator(); ++it) {
    out += options_.filename.substr(last, it->position() - last);
    const std::string key = (*it)[1];
    const std::string spec = (*it)[2].matched ? std::string((*it)[2]).substr(1) : std::string();
    const bool integer = key == "epoch" || key == "step";
    double v = NAN;
    if (integer) {
      v = static_cast<double>(key == "epoch" ? t.current_epoch() : t.global_step());
    } else {
      auto m = t.callback_metrics().find(key);
      if (m != t.callback_metrics().end()) v = m->second;
    }
    // The spec was checked at construction (check_checkpoint_filename): only numeric conversions.
    const std::string f = spec.empty() ? (integer ? "%.0f" : "%.4f") : printf_spec(spec, integer);
    char buf[64];
    std::snprintf(buf, sizeof buf, f.c_str(), v);
    out += key + "=" + buf;
    last = it->position() + it->length();
  }
  out += options_.filename.substr(last);
  return out + ".ckpt";
}

void ModelCheckpoint::save(Trainer& t) {
  // fast_dev_run is a smoke test: no checkpoints, as Lightning's ModelCheckpoint skips it.
  if (t.fast_dev_run() > 0 || t.global_step() == last_saved_step_) return;
  save_topk(t);
  save_last(t);
  last_saved_step_ = t.global_step();
}

void ModelCheckpoint::save_topk(Trainer& t) {
  if (options_.save_top_k == 0) return;
  if (options_.monitor.empty()) {
    const std::string path = from_rank0(t, (fs::path(dir(t)) / format_name(t)).string());
    // No monitor: keep the latest only (save_top_k 1) or all (-1).
    t.save_checkpoint(path, options_.save_weights_only);
    if (options_.save_top_k == 1 && !best_model_path_.empty() && best_model_path_ != path && t.is_global_zero())
      detail::remove_tree(best_model_path_);
    best_model_path_ = path;
    return;
  }
  const auto [has, score] = monitored_on_rank0(t, options_.monitor);
  if (!has) {
    check_monitor_logged(t);
    return;  // not logged yet (e.g. before the first validation)
  }
  const bool better_is_lower = options_.mode == "min";
  auto worse = [&](double a, double b) { return better_is_lower ? a > b : a < b; };
  std::string replaced;  // the worst of a full top k, removed once the better one is saved
  if (options_.save_top_k > 0 && static_cast<int64_t>(best_k_.size()) >= options_.save_top_k) {
    auto worst = std::max_element(best_k_.begin(), best_k_.end(),
                                  [&](const auto& a, const auto& b) { return worse(b.second, a.second); });
    if (!worse(worst->second, score)) return;
    replaced = worst->first;
    best_k_.erase(worst);
  }
  // A name that one of the kept checkpoints has (a filename without changing fields) gets
  // "-v1", "-v2", ... as Lightning's version counter gives it, instead of overwriting that one.
  std::string path = (fs::path(dir(t)) / format_name(t)).string();
  const std::string stem = path.substr(0, path.size() - 5);  // without ".ckpt"
  for (int v = 1; best_k_.count(path) > 0; ++v) path = stem + "-v" + std::to_string(v) + ".ckpt";
  path = from_rank0(t, path);
  t.save_checkpoint(path, options_.save_weights_only);
  if (!replaced.empty() && replaced != path && t.is_global_zero()) detail::remove_tree(replaced);
  best_k_[path] = score;
  auto best = std::min_element(best_k_.begin(), best_k_.end(),
                               [&](const auto& a, const auto& b) { return worse(b.second, a.second); });
  best_model_path_ = best->first;
}

void ModelCheckpoint::save_last(Trainer& t) {
  if (!options_.save_last) return;
  last_model_path_ = (fs::path(dir(t)) / "last.ckpt").string();
  t.save_checkpoint(last_model_path_, options_.save_weights_only);
}

void ModelCheckpoint::on_train_batch_end(Trainer& t, LightningModule&, const torch::Tensor&, const Batch&, int64_t) {
  bool due =
      options_.every_n_train_steps > 0 && t.global_step() > 0 && t.global_step() % options_.every_n_train_steps == 0;
  if (options_.train_time_interval > 0) {
    const double now = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    // Every rank must agree, or some would enter the collective save and others not.
    bool time_due = t.strategy().reduce_boolean_decision(now - last_time_save_ >= options_.train_time_interval, false);
    if (time_due) {
      last_time_save_ = now;
      due = true;
    }
  }
  if (due) save(t);
}

void ModelCheckpoint::check_monitor_logged(Trainer& t) const {
  // As Lightning: a monitor still missing once validation has run was never going to be logged.
  if (validated_) monitor_missing(t);
}

void ModelCheckpoint::monitor_missing(Trainer& t) const {
  std::string known;
  for (const auto& [k, v] : t.callback_metrics()) known += (known.empty() ? "" : ", ") + k;
  throw ConfigError(detail::str_cat(
      "ModelCheckpoint(monitor='", options_.monitor, "') could not find the monitored key in the logged metrics: [",
      known, "]. HINT: did you call log('", options_.monitor, "', value) in the LightningModule?"));
}

void ModelCheckpoint::on_train_epoch_end(Trainer& t, LightningModule&) {
  // Without a validation loop every metric there will be was logged by a training epoch's end.
  const bool missing = !options_.monitor.empty() && !monitored_on_rank0(t, options_.monitor).first;
  if (missing && !t.enable_validation()) monitor_missing(t);
  if (options_.every_n_train_steps > 0 || options_.train_time_interval > 0) return;
  if (missing) {
    check_monitor_logged(t);
    return;  // wait for validation
  }
  if (options_.every_n_epochs > 0 && (t.current_epoch() + 1) % options_.every_n_epochs == 0) save(t);
}

void ModelCheckpoint::on_validation_end(Trainer& t, LightningModule&) {
  if (!t.sanity_checking()) validated_ = true;
  if (t.sanity_checking() || options_.monitor.empty() || options_.every_n_train_steps > 0) return;
  // A monitor that is not a validation metric (one logged at the training epoch's end) is saved
  // for, or found missing, at the epoch's end.
  if (!monitored_on_rank0(t, options_.monitor).first) return;
  if (options_.every_n_epochs > 0 && (t.current_epoch() + 1) % options_.every_n_epochs == 0) save(t);
}

void ModelCheckpoint::on_train_end(Trainer& t, LightningModule&) {
  // Make sure the final state is on disk as last.ckpt when asked for.
  if (options_.save_last && last_saved_step_ != t.global_step()) save_last(t);
}

YAML::Node ModelCheckpoint::state_dict() const {
  YAML::Node n(YAML::NodeType::Map);
  n["best_model_path"] = best_model_path_;
  n["last_model_path"] = last_model_path_;
  for (const auto& [p, s] : best_k_) n["best_k_models"][p] = s;
  return n;
}

void ModelCheckpoint::load_state_dict(const YAML::Node& s) {
  if (s["best_model_path"]) best_model_path_ = s["best_model_path"].as<std::string>();
  if (s["last_model_path"]) last_model_path_ = s["last_model_path"].as<std::string>();
  best_k_.clear();
  if (s["best_k_models"])
    for (const auto& kv : s["best_k_models"]) best_k_[kv.first.as<std::string>()] = kv.second.as<double>();
}

}  // namespace volt
