#pragma once
/// The demo's data module: WikiText-2 splits from `data_dir` (sharing one vocabulary), batched.
/// A missing file is fetched from `url` (a base URL; http, https or file) when one is configured,
/// otherwise it is a DataError that says where to get it.
#include <memory>
#include <string>

#include "volt/core/options.h"
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
  void validate() const;
};

class WikiText2Data {
 public:
  explicit WikiText2Data(WikiText2DataOptions options);
  int64_t vocab_size() const;
  std::shared_ptr<DataLoader> train_loader();
  /// nullptr when val_file is empty.
  std::shared_ptr<DataLoader> val_loader();
  std::shared_ptr<DataLoader> test_loader();

 private:
  std::shared_ptr<WikiText2> load(const std::string& file);
  WikiText2DataOptions options_;
  std::shared_ptr<Dictionary> dictionary_;
  std::shared_ptr<WikiText2> train_, val_, test_;
};

}  // namespace volt::demos
