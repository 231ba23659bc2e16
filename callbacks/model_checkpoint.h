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
#include "volt/callbacks/checkpoint_folder.h"
#include "volt/callbacks/model_checkpoint_options.h"

namespace volt {

class ModelCheckpoint : public Callback {
 public:
  explicit ModelCheckpoint(ModelCheckpointOptions options = {});
  /// As Lightning's: the class and its monitor, mode and triggers, e.g. "ModelCheckpoint{'monitor':
  /// 'val_loss', 'mode': 'min', 'every_n_train_steps': 0, 'every_n_epochs': 1,
  /// 'train_time_interval': None}", so that two of them keep their own states in one checkpoint.
  std::string state_key() const override;
  std::vector<std::string> legacy_state_keys() const override { return {"ModelCheckpoint"}; }

  /// In fit, rank 0 locks the checkpoint folder for this run (a second run writing there fails at
  /// once; the ModelCheckpoints of one Trainer share the folder), removes what an interrupted save left (`*.partial`
  /// folders,
  /// `*.tmp.[h<tag>.]<pid>` files of this host's dead processes) and warns when the folder holds an earlier run's
  /// files.
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
  using FolderLock = detail::CheckpointFolderLock;

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

}  // namespace volt
