#pragma once
/// ModelCheckpoint with Lightning's options: saves checkpoints during fit into `dirpath` (default
/// <default_root_dir>/checkpoints), named by `filename` ("{epoch}-{step}" by default; metric names
/// in braces are filled in), keeps the best `save_top_k` by `monitor`, and optionally `last.ckpt`
/// (a copy, or with save_last "link" a symbolic link to the newest checkpoint). Writes are atomic
/// (see tensor_archive.h and sharded_checkpoint.h); with FSDP state_dict_type "sharded" each
/// checkpoint is a folder of that name. Its own state (best paths) is checkpointed too.
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "volt/callbacks/callback.h"
#include "volt/core/files.h"
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
  int64_t every_n_epochs = 1;            // ignored when every_n_train_steps or train_time_interval is set
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

class ModelCheckpoint : public Callback {
 public:
  explicit ModelCheckpoint(ModelCheckpointOptions options = {});
  std::string state_key() const override { return "ModelCheckpoint"; }

  /// In fit, rank 0 locks the checkpoint folder for this run (a second run writing there fails at
  /// once; the ModelCheckpoints of one Trainer share the folder), removes what an interrupted save left (`*.partial`
  /// folders,
  /// `*.tmp.<pid>` files of dead processes) and warns when the folder holds an earlier run's files.
  void setup(Trainer&, LightningModule&, const std::string& stage) override;
  void teardown(Trainer&, LightningModule&, const std::string& stage) override;
  void on_exception(Trainer&, LightningModule&, const std::exception&) override;
  void on_train_batch_end(Trainer&, LightningModule&, const torch::Tensor&, const Batch&, int64_t) override;
  void on_train_epoch_end(Trainer&, LightningModule&) override;
  void on_validation_end(Trainer&, LightningModule&) override;
  void on_train_end(Trainer&, LightningModule&) override;
  YAML::Node state_dict() const override;
  void load_state_dict(const YAML::Node& state) override;

  const std::string& best_model_path() const { return best_model_path_; }
  const std::string& last_model_path() const { return last_model_path_; }
  /// The checkpoint ckpt_path "last" resumes from: the newest (by modification time) of this
  /// callback's folder's last.ckpt and last-v<N>.ckpt, a link followed to its target; "" if none.
  /// CheckpointError when that last.ckpt is a link whose target is gone.
  std::string last_model_path_on_disk(const Trainer& t) const;
  const ModelCheckpointOptions& options() const { return options_; }

  /// A checkpoint folder's lock, shared by the ModelCheckpoints of the Trainer that took it.
  struct FolderLock {
    detail::FileLock lock;
    const Trainer* owner = nullptr;
  };

 private:
  std::string dir(const Trainer& t) const;
  /// The file name without ".ckpt".
  std::string format_name(const Trainer& t) const;
  /// Rank 0's `<dir>/<stem>.ckpt`, or with the version counter the first of `<stem>-v1.ckpt`, ...
  /// that is neither on disk nor kept (`keep`, the checkpoint this save replaces, counts as free).
  std::string free_path(Trainer& t, const std::string& stem, const std::string& keep) const;
  bool save_on_train_epoch_end(const Trainer& t) const;
  bool epoch_due(const Trainer& t) const;
  bool skip(const Trainer& t) const;
  /// The top k (when `topk`) and last.ckpt for this step, unless this step is saved already.
  void save(Trainer& t, bool topk);
  void save_topk(Trainer& t);
  void save_last(Trainer& t);
  void write(Trainer& t, const std::string& path);
  /// ConfigError (Lightning's words) when the monitor is missing although validation has run.
  void check_monitor_logged(Trainer& t) const;
  /// ConfigError (Lightning's words) naming the monitor and the metrics that were logged.
  [[noreturn]] void monitor_missing(Trainer& t) const;

  ModelCheckpointOptions options_;
  std::map<std::string, double> best_k_;  // path -> score
  std::string best_model_path_;
  std::string last_model_path_;
  std::string last_topk_path_;  // the newest top-k checkpoint written, at step last_topk_step_
  int64_t last_topk_step_ = -1;
  int64_t last_saved_step_ = 0;  // as Lightning: nothing to save before the first step
  double last_time_save_ = 0;
  bool validated_ = false;            // a (non-sanity) validation has run in this fit
  bool fitting_ = false;              // between setup("fit") and teardown: validate() saves nothing
  std::shared_ptr<FolderLock> lock_;  // rank 0, during fit
};

namespace detail {
/// Checks every `{key:spec}` of a ModelCheckpoint filename: the spec must be a numeric format
/// ([0][width][.precision][d|f|e|g]); ConfigError naming the field otherwise.
void check_checkpoint_filename(const std::string& filename);
}  // namespace detail

}  // namespace volt
