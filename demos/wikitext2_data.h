#pragma once
/// The demo's LightningDataModule: WikiText-2 splits from `data_dir` (sharing one vocabulary),
/// batched. prepare_data fetches a missing file from `url` (a base URL; http, https or file) when
/// one is configured; setup builds the vocabulary and the splits, where a file still missing is a
/// DataError that says where to get it. predict uses the test split.
///
/// Ownership: the data module owns its splits; the loaders share them. Thread-safety: as
/// LightningDataModule (hooks from the training thread).
#include <memory>
#include <string>

#include "volt/core/options.h"
#include "volt/data/data_module.h"
#include "volt/module/data.h"

namespace volt::demos {

class Dictionary;
class WikiText2;

struct WikiText2DataOptions {
  std::string data_dir = "../shared/data/wikitext-2";
  std::string train_file = "valid.txt";  // train.txt is not shipped offline; valid.txt stands in
  std::string val_file = "test.txt";
  std::string test_file = "test.txt";
  std::string url;  // base URL to fetch missing files from, e.g. file:///data/wikitext-2
  int64_t block_size = 35;
  int64_t batch_size = 20;
  bool shuffle = true;
  int64_t seed = 42;

  template <class V>
  void visit(V& v) {
    v("data_dir", data_dir)("train_file", train_file)("val_file", val_file)("test_file", test_file)("url", url)(
        "block_size", block_size)("batch_size", batch_size)("shuffle", shuffle)("seed", seed);
  }
  /// Throws ConfigError naming `<prefix>.<field>`; block_size may not exceed the demo model's
  /// positions (kMaxSequenceLength).
  void validate(const std::string& prefix = "data") const;
};

class WikiText2Data : public LightningDataModule {
 public:
  using Options = WikiText2DataOptions;

  /// Validates the options; reads nothing yet.
  explicit WikiText2Data(WikiText2DataOptions options);
  ~WikiText2Data() override;

  /// Fetches every configured file missing from data_dir from `url` (nothing without a url).
  void prepare_data() override;
  /// Builds the vocabulary and every configured split, in the order train, val, test (so token ids
  /// are the same whatever the stage), once: later calls keep them.
  void setup(const std::string& stage) override;
  std::shared_ptr<DataLoader> train_dataloader() override;
  /// None when val_file is empty.
  DataLoaders val_dataloader() override;
  /// ConfigError when test_file is empty.
  DataLoaders test_dataloader() override;
  /// The test split, in order.
  DataLoaders predict_dataloader() override;
  /// The options (saved beside the model's hyperparameters).
  YAML::Node hparams() const override;
  /// The vocabulary's size after setup (ConfigError before); the demo links it to model.vocab_size.
  int64_t num_words() const;

  // Without a Trainer: each of these runs prepare_data and setup("fit") first if needed.
  int64_t vocab_size();
  std::shared_ptr<DataLoader> train_loader();
  /// nullptr when val_file is empty.
  std::shared_ptr<DataLoader> val_loader();
  /// nullptr when test_file is empty.
  std::shared_ptr<DataLoader> test_loader();

 private:
  void ensure_setup();
  std::shared_ptr<DataLoader> eval_loader(const std::shared_ptr<WikiText2>& split) const;
  WikiText2DataOptions options_;
  std::shared_ptr<Dictionary> dictionary_;
  std::shared_ptr<WikiText2> train_, val_, test_;
};

}  // namespace volt::demos
