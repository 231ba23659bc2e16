#pragma once
/// ModelCheckpoint with Lightning's options: saves checkpoints during fit into `dirpath` (default
/// <default_root_dir>/checkpoints), named by `filename` ("{epoch}-{step}" by default; metric names
/// in braces are filled in), keeps the best `save_top_k` by `monitor`, and optionally `last.ckpt`.
/// Writes are atomic (see tensor_archive.h and sharded_checkpoint.h); with FSDP state_dict_type
/// "sharded" each checkpoint is a folder of that name. Its own state (best paths) is checkpointed too.
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "volt/callbacks/callback.h"
#include "volt/core/files.h"
#include "volt/core/options.h"

namespace volt {

struct ModelCheckpointOptions {
  std::string dirpath;  // "" = <default_root_dir>/checkpoints
  std::string filename = "{epoch}-{step}";
  std::string monitor;  // "" = keep the latest
  std::string mode = "min";
  int64_t save_top_k = 1;  // -1 = all, 0 = none (but last)
  bool save_last = false;
  int64_t every_n_train_steps = 0;
  int64_t every_n_epochs = 1;
  double train_time_interval = 0;  // seconds; 0 = off
  bool save_weights_only = false;

  template <class V>
  void visit(V& v) {
    v("dirpath", dirpath)("filename", filename)("monitor", monitor)("mode", mode)("save_top_k", save_top_k)(
        "save_last", save_last)("every_n_train_steps", every_n_train_steps)("every_n_epochs", every_n_epochs)(
        "train_time_interval", train_time_interval)("save_weights_only", save_weights_only);
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
  /// The last.ckpt this callback would resume from, if it exists.
  std::string last_model_path_on_disk(const Trainer& t) const;
  const ModelCheckpointOptions& options() const { return options_; }

  /// A checkpoint folder's lock, shared by the ModelCheckpoints of the Trainer that took it.
  struct FolderLock {
    detail::FileLock lock;
    const Trainer* owner = nullptr;
  };

 private:
  std::string dir(const Trainer& t) const;
  std::string format_name(const Trainer& t) const;
  void save(Trainer& t);
  void save_topk(Trainer& t);
  void save_last(Trainer& t);
  /// ConfigError (Lightning's words) when the monitor is missing although validation has run.
  void check_monitor_logged(Trainer& t) const;
  /// ConfigError (Lightning's words) naming the monitor and the metrics that were logged.
  [[noreturn]] void monitor_missing(Trainer& t) const;

  ModelCheckpointOptions options_;
  std::map<std::string, double> best_k_;  // path -> score
  std::string best_model_path_;
  std::string last_model_path_;
  int64_t last_saved_step_ = -1;
  double last_time_save_ = 0;
  bool validated_ = false;            // a (non-sanity) validation has run in this fit
  std::shared_ptr<FolderLock> lock_;  // rank 0, during fit
};

namespace detail {
/// Checks every `{key:spec}` of a ModelCheckpoint filename: the spec must be a numeric format
/// ([0][width][.precision][d|f|e|g]); ConfigError naming the field otherwise.
void check_checkpoint_filename(const std::string& filename);
}  // namespace detail

}  // namespace volt
