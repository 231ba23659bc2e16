#pragma once
/// LightningDataModule: everything about a dataset in one class — how to get it (prepare_data), how
/// to build its splits (setup), and the loaders of each stage — as Lightning's. Give it to
/// Trainer::fit / validate / test / predict instead of loaders.
///
/// Order (Lightning's): prepare_data on global rank 0 only, while the other ranks wait at a barrier
/// (download or write files here; state set here is not seen by other ranks); then setup(stage) on
/// every rank; then the stage's loaders, each handed to the strategy (distributed sampling); at the
/// end teardown(stage). state_dict() is saved in checkpoints (key "datamodule") and given back by
/// load_state_dict() on resume.
///
/// Ownership: the Trainer borrows the data module for the duration of a call and holds the loaders
/// it returns (shared) for that time. Thread-safety: hooks are called from the training thread.
#include <yaml-cpp/yaml.h>

#include <memory>
#include <string>
#include <vector>

#include "volt/core/stateful.h"
#include "volt/data/batch.h"
#include "volt/data/data_loader.h"
#include "volt/data/dataset.h"

namespace volt {

/// Several loaders of one stage (validation and test may have more than one, as in Lightning; the
/// steps then receive dataloader_idx). `return {loader};` or `return {a, b};`.
using DataLoaders = std::vector<std::shared_ptr<DataLoader>>;

class LightningDataModule : public Stateful {
 public:
  ~LightningDataModule() override = default;

  /// Once per run, on global rank 0, before setup (the other ranks wait).
  virtual void prepare_data() {}
  /// On every rank; stage is "fit", "validate", "test" or "predict".
  virtual void setup(const std::string& stage) {}
  virtual void teardown(const std::string& stage) {}

  /// The training loader (required by fit; the default raises a ConfigError naming the hook).
  virtual std::shared_ptr<DataLoader> train_dataloader();
  /// Validation loaders (none by default: fit then trains without validation).
  virtual DataLoaders val_dataloader() { return {}; }
  /// Test / predict loaders (required by test / predict).
  virtual DataLoaders test_dataloader();
  virtual DataLoaders predict_dataloader();

  /// Hyper-parameters saved in checkpoints and the logger's hparams.yaml beside the module's.
  virtual YAML::Node hparams() const { return YAML::Node(YAML::NodeType::Map); }

  /// Stateful: saved under "datamodule" in checkpoints (empty by default).
  YAML::Node state_dict() const override { return YAML::Node(YAML::NodeType::Map); }
  void load_state_dict(const YAML::Node& state) override {}
};

}  // namespace volt
