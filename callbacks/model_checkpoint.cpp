#include "volt/callbacks/model_checkpoint.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>

#include "volt/checkpoint/comm_text.h"
#include "volt/checkpoint/temp_file.h"
#include "volt/core/files.h"
#include "volt/trainer/trainer.h"

namespace volt {

namespace fs = std::filesystem;

namespace {
// Every rank must take the same saving decisions, or some would enter the collective save (a
// barrier; FSDP gathers) and the others not. As Lightning broadcasts rank 0's checkpoint path,
// rank 0's view of the monitored metric decides for all: a metric logged without sync_dist may
// differ between ranks.

/// Rank 0's `s` on every rank.
std::string from_rank0(Trainer& t, const std::string& s) {
  return detail::broadcast_text(t.strategy().state_comm(), s, 0);
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

ModelCheckpoint::ModelCheckpoint(ModelCheckpointOptions options) : options_(std::move(options)) { options_.validate(); }

namespace {
/// Python's repr of a timedelta of `seconds` (Lightning's state key prints train_time_interval so).
std::string timedelta_repr(double seconds) {
  auto micros = static_cast<int64_t>(std::llround(seconds * 1e6));
  const int64_t days = micros / 86400000000LL;
  micros -= days * 86400000000LL;
  const int64_t secs = micros / 1000000;
  micros -= secs * 1000000;
  std::string out;
  auto part = [&](const char* name, int64_t v) {
    if (v == 0) return;
    out += (out.empty() ? "" : ", ") + std::string(name) + "=" + std::to_string(v);
  };
  part("days", days);
  part("seconds", secs);
  part("microseconds", micros);
  return "datetime.timedelta(" + (out.empty() ? std::string("0") : out) + ")";
}
}  // namespace

std::string ModelCheckpoint::state_key() const {
  const ModelCheckpointOptions& o = options_;
  // Lightning's __init_triggers: the default every_n_epochs=1 gives way to the other triggers.
  const bool other = o.every_n_train_steps > 0 || o.train_time_interval.seconds > 0;
  const int64_t every_n_epochs = other && o.every_n_epochs == 1 ? 0 : o.every_n_epochs;
  return detail::str_cat("ModelCheckpoint{'monitor': ", o.monitor.empty() ? "None" : "'" + o.monitor + "'",
                         ", 'mode': '", o.mode, "', 'every_n_train_steps': ", o.every_n_train_steps,
                         ", 'every_n_epochs': ", every_n_epochs, ", 'train_time_interval': ",
                         o.train_time_interval.seconds > 0 ? timedelta_repr(o.train_time_interval.seconds) : "None",
                         "}");
}

std::string ModelCheckpoint::dir(const Trainer& t) const {
  return options_.dirpath.empty() ? (fs::path(t.options().default_root_dir) / "checkpoints").string()
                                  : options_.dirpath;
}

std::string ModelCheckpoint::last_model_path_on_disk(const Trainer& t) const {
  return detail::newest_last_checkpoint(dir(t));
}

void ModelCheckpoint::setup(Trainer& t, LightningModule&, const std::string& stage) {
  last_time_save_ = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  validated_ = false;
  fitting_ = stage == "fit";
  if (!fitting_) return;
  // Rank 0 decides; every rank learns the outcome, so all fail together rather than some waiting.
  const std::string error = from_rank0(
      t, t.is_global_zero() ? detail::prepare_checkpoint_folder(dir(t), &t, options_.enable_version_counter, lock_)
                            : std::string());
  // A ConfigError (the CLI's exit code 2): a restart agent must not retry into a folder another run
  // holds, then resume from that run's last.ckpt once it has ended.
  VOLT_CHECK(error.empty(), ConfigError, error);
}

void ModelCheckpoint::teardown(Trainer&, LightningModule&, const std::string&) {
  lock_.reset();
  fitting_ = false;
}

void ModelCheckpoint::on_exception(Trainer&, LightningModule&, const std::exception&) { lock_.reset(); }

std::string ModelCheckpoint::format_name(const Trainer& t) const {
  return detail::format_checkpoint_name(options_.filename, options_.auto_insert_metric_name, t.current_epoch(),
                                        t.global_step(), t.callback_metrics());
}

std::string ModelCheckpoint::free_path(Trainer& t, const std::string& stem, const std::string& keep) const {
  const fs::path d(dir(t));
  std::string path = (d / (stem + ".ckpt")).string();
  if (!options_.enable_version_counter) return path;
  // Rank 0's file system decides for every rank, as Lightning's file_exists broadcasts it.
  if (t.is_global_zero()) {
    auto taken = [&](const std::string& p) {
      return p != keep && (best_k_.count(p) > 0 || detail::path_exists(p));  // a dangling link is taken too
    };
    for (int v = 1; taken(path); ++v) path = (d / (stem + "-v" + std::to_string(v) + ".ckpt")).string();
  }
  return from_rank0(t, path);
}

bool ModelCheckpoint::skip(const Trainer& t) const {
  // fast_dev_run is a smoke test: no checkpoints, as Lightning's ModelCheckpoint skips it.
  return !fitting_ || t.fast_dev_run() > 0 || t.sanity_checking() || t.global_step() == last_saved_step_;
}

void ModelCheckpoint::save(Trainer& t, bool topk) {
  if (skip(t)) return;
  // The last.ckpt of this run keeps its name; a new run beside an earlier run's gets a version.
  // Named first, so that the top-k checkpoint it may link to holds it in its state too.
  if (options_.save_last) last_model_path_ = free_path(t, "last", last_model_path_);
  if (topk) save_topk(t);
  save_last(t);
}

namespace {
fs::path normalized(const std::string& p) {
  fs::path n = fs::absolute(p).lexically_normal();
  return n.has_filename() ? n : n.parent_path();  // "ckpts/" is "ckpts"
}

/// `p` with its symbolic links resolved where they exist, so that one folder has one spelling.
fs::path resolved(const std::string& p) {
  std::error_code ec;
  const fs::path r = fs::weakly_canonical(normalized(p), ec);
  return ec ? normalized(p) : r;
}

/// Whether `path` lies inside the folder `dir` (a filename may hold folders: "{val/loss}").
bool inside(const std::string& path, const std::string& dir) {
  const fs::path rel = resolved(path).lexically_relative(resolved(dir));
  return !rel.empty() && *rel.begin() != ".." && rel != ".";
}

/// Lightning's _should_remove_checkpoint: never the one just written, nor the checkpoint this fit
/// resumed from (a resumed run keeps its starting point), and only from rank 0. And never a file
/// outside this callback's folder (`dir`): a run resumed from another run's checkpoint inherits
/// that run's top k by name, and those files are the other run's.
bool removable(const Trainer& t, const std::string& previous, const std::string& current, const std::string& dir) {
  if (previous.empty() || previous == current || !t.is_global_zero()) return false;
  if (!inside(previous, dir)) return false;
  // As Lightning, by path: resuming from "last" (a moving name) does not pin what it pointed at.
  return t.ckpt_path().empty() || normalized(previous) != normalized(t.ckpt_path());
}

/// Drops the top-k entries of another folder (restored from a checkpoint another run wrote, as
/// Lightning does when the dirpath changed): they neither count against this run's k nor get
/// removed by it. Rank 0 decides for every rank (paths resolve against each process's folder), and
/// says so once.
void drop_foreign(Trainer& t, std::map<std::string, double>& best_k, const std::string& dir) {
  if (best_k.empty()) return;  // alike on every rank: restored from one checkpoint, updated together
  std::string foreign;         // one path a line
  if (t.is_global_zero())
    for (const auto& [path, score] : best_k)
      if (!inside(path, dir)) foreign += path + "\n";
  foreign = from_rank0(t, foreign);
  if (foreign.empty()) return;
  std::istringstream lines(foreign);
  int64_t n = 0;
  std::string first;
  for (std::string p; std::getline(lines, p); ++n) {
    if (first.empty()) first = p;
    best_k.erase(p);
  }
  if (t.is_global_zero())
    spdlog::warn(
        "ModelCheckpoint: the resumed checkpoint's top {} came from another folder ('{}'); they stay there "
        "untouched, and this run keeps its own top k in '{}'",
        n, normalized(first).parent_path().string(), dir);
}
}  // namespace

void ModelCheckpoint::write(Trainer& t, const std::string& path) {
  t.save_checkpoint(path, options_.save_weights_only);
  last_saved_step_ = t.global_step();
}

void ModelCheckpoint::save_topk(Trainer& t) {
  if (options_.save_top_k == 0) return;
  const std::string folder = dir(t);
  drop_foreign(t, best_k_, folder);
  if (options_.monitor.empty()) {
    // No monitor: keep the latest only (save_top_k 1) or all (-1).
    const std::string path = free_path(t, format_name(t), best_model_path_);
    // Set before the save, as Lightning: the checkpoint's own state names it as the best, so a run
    // resumed from it removes it when it saves the next one.
    const std::string previous = best_model_path_;
    best_model_path_ = path;
    write(t, path);
    if (options_.save_top_k == 1 && removable(t, previous, path, folder))
      t.remove_checkpoint(previous);  // once the new one is whole (an asynchronous save)
  } else {
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
    // A name that one of the kept checkpoints or an earlier run's file has gets "-v1", "-v2", ...
    // (Lightning's version counter) instead of overwriting it.
    const std::string path = free_path(t, format_name(t), replaced);
    best_k_[path] = score;  // before the save, so that the checkpoint's state includes it
    auto best = std::min_element(best_k_.begin(), best_k_.end(),
                                 [&](const auto& a, const auto& b) { return worse(b.second, a.second); });
    best_model_path_ = best->first;
    write(t, path);
    if (removable(t, replaced, path, folder)) t.remove_checkpoint(replaced);
    last_topk_path_ = path;
    last_topk_step_ = t.global_step();
    return;
  }
  last_topk_path_ = best_model_path_;
  last_topk_step_ = t.global_step();
}

namespace {
/// Rank 0: `link` (last.ckpt) made a relative symbolic link to `target`, a checkpoint file or
/// sharded folder of the same folder. Returns "" or why not (then `link` is as it was).
std::string link_checkpoint(const std::string& target, const std::string& link) {
  if (fs::path(target).parent_path() != fs::path(link).parent_path())
    return "the newest checkpoint '" + target + "' is not in the folder of '" + link + "'";
  std::error_code ec;
  const std::string tmp = detail::temp_sibling_name(link, static_cast<long>(::getpid()));
  detail::remove_tree(tmp);
  fs::create_symlink(fs::path(target).filename(), tmp, ec);
  if (ec) return "cannot create a symbolic link: " + ec.message();
  // A sharded copy of last.ckpt is a folder, which rename does not replace.
  if (fs::is_directory(fs::symlink_status(link, ec))) detail::remove_tree(link);
  fs::rename(tmp, link, ec);
  if (ec) {
    detail::remove_tree(tmp);
    return "cannot replace '" + link + "': " + ec.message();
  }
  return {};
}
}  // namespace

void ModelCheckpoint::save_last(Trainer& t) {
  if (!options_.save_last) return;
  last_model_path_ = free_path(t, "last", last_model_path_);
  // "link": to the top-k checkpoint of this very step (one of an earlier step would resume from a
  // stale state); without one, a copy, as when the link cannot be made.
  // Under AsyncCheckpointIO that checkpoint may still be being written when last.ckpt would point at
  // it, and a crash then would leave a dangling last.ckpt: last.ckpt is a (likewise atomic) copy.
  const auto& plugins = t.options().plugins;
  const bool async = std::find(plugins.begin(), plugins.end(), "AsyncCheckpointIO") != plugins.end();
  const bool link = options_.save_last.mode == SaveLast::Mode::link && !async && last_topk_step_ == t.global_step() &&
                    !last_topk_path_.empty();
  std::string outcome;  // rank 0's: "linked", or why not
  if (t.is_global_zero()) {
    std::string why = link ? link_checkpoint(last_topk_path_, last_model_path_) : std::string("-");
    if (why.empty()) {
      outcome = "linked";
    } else {
      if (link) spdlog::warn("ModelCheckpoint(save_last='link'): {}; writing a copy instead", why);
      // A copy replaces the file, never a link's target.
      if (fs::is_symlink(last_model_path_)) detail::remove_tree(last_model_path_);
    }
  }
  if (from_rank0(t, outcome) == "linked") return;
  write(t, last_model_path_);
}

void ModelCheckpoint::on_train_batch_end(Trainer& t, LightningModule&, const torch::Tensor&, const Batch&, int64_t) {
  bool due =
      options_.every_n_train_steps > 0 && t.global_step() > 0 && t.global_step() % options_.every_n_train_steps == 0;
  // Not inside an accumulation window: its gradients would not be in the checkpoint (see
  // [Note: whole accumulation windows] in trainer/fit_loop.h). Every rank is at the same batch.
  if (options_.train_time_interval > 0 && !t.accumulating_gradients()) {
    const double now = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    // Every rank must agree, or some would enter the collective save and others not.
    bool time_due = t.strategy().reduce_boolean_decision(now - last_time_save_ >= options_.train_time_interval, false);
    if (time_due) {
      last_time_save_ = now;
      due = true;
    }
  }
  if (due) save(t, true);
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

bool ModelCheckpoint::save_on_train_epoch_end(const Trainer& t) const {
  if (options_.save_on_train_epoch_end) return *options_.save_on_train_epoch_end;
  // Lightning's rule for None. Without a validation loop the epoch's end is the only point; with
  // one, after validation unless it runs exactly once, at the end of every epoch.
  if (!t.enable_validation()) return true;
  const auto& o = t.options();
  if (o.check_val_every_n_epoch != 1) return false;
  return o.val_check_interval.is_fraction && o.val_check_interval.value == 1.0;
}

bool ModelCheckpoint::epoch_due(const Trainer& t) const {
  // every_n_train_steps or train_time_interval replace the epoch trigger (Lightning's every_n_epochs
  // defaults to 0 then).
  if (options_.every_n_train_steps > 0 || options_.train_time_interval.seconds > 0) return false;
  return options_.every_n_epochs > 0 && (t.current_epoch() + 1) % options_.every_n_epochs == 0;
}

void ModelCheckpoint::on_train_epoch_end(Trainer& t, LightningModule&) {
  // Without a validation loop every metric there will be was logged by a training epoch's end.
  const bool missing = !options_.monitor.empty() && !monitored_on_rank0(t, options_.monitor).first;
  if (missing && !t.enable_validation()) monitor_missing(t);
  if (save_on_train_epoch_end(t)) save(t, epoch_due(t));
}

void ModelCheckpoint::on_validation_end(Trainer& t, LightningModule&) {
  if (!fitting_ || t.sanity_checking()) return;
  validated_ = true;
  if (save_on_train_epoch_end(t)) return;
  // A monitor that is not a validation metric (one logged at the training epoch's end) may be
  // missing after a validation within the epoch: the top k waits for it, last.ckpt does not.
  const bool has = options_.monitor.empty() || monitored_on_rank0(t, options_.monitor).first;
  save(t, has && epoch_due(t));
}

void ModelCheckpoint::on_train_end(Trainer& t, LightningModule&) {
  // volt keeps the final state as last.ckpt even when no trigger fell on the last step, so that
  // ckpt_path=last resumes from where fit ended.
  if (options_.save_last && !skip(t)) save_last(t);
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
