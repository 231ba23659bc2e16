#include "volt/demos/wikitext2_data.h"

#include <filesystem>

#include "volt/core/download.h"
#include "volt/core/errors.h"
#include "volt/demos/wikitext2.h"

namespace volt::demos {

namespace fs = std::filesystem;

void WikiText2DataOptions::validate() const {
  VOLT_CHECK(block_size >= 1, ConfigError, "config key 'data.block_size': must be >= 1, got ", block_size);
  VOLT_CHECK(batch_size >= 1, ConfigError, "config key 'data.batch_size': must be >= 1, got ", batch_size);
  VOLT_CHECK(!train_file.empty(), ConfigError, "config key 'data.train_file': must not be empty");
}

WikiText2Data::WikiText2Data(WikiText2DataOptions options) : options_(std::move(options)) {
  options_.validate();
  dictionary_ = std::make_shared<Dictionary>();
  // Build the vocabulary in a fixed order (train, val, test) so every rank gets the same ids.
  train_ = load(options_.train_file);
  if (!options_.val_file.empty()) val_ = load(options_.val_file);
  if (!options_.test_file.empty()) test_ = load(options_.test_file);
}

std::shared_ptr<WikiText2> WikiText2Data::load(const std::string& file) {
  const std::string path = (fs::path(options_.data_dir) / file).string();
  if (!fs::exists(path) && !options_.url.empty()) {
    std::string base = options_.url;
    if (base.back() != '/') base += '/';
    download_file(base + file, path);
  }
  return std::make_shared<WikiText2>(options_.data_dir, file, dictionary_, options_.block_size);
}

int64_t WikiText2Data::vocab_size() const { return static_cast<int64_t>(dictionary_->size()); }

std::shared_ptr<DataLoader> WikiText2Data::train_loader() {
  return std::make_shared<DataLoader>(
      train_, DataLoaderOptions{options_.batch_size, options_.shuffle, false, static_cast<uint64_t>(options_.seed)});
}
std::shared_ptr<DataLoader> WikiText2Data::val_loader() {
  if (!val_) return nullptr;
  return std::make_shared<DataLoader>(val_, DataLoaderOptions{options_.batch_size, false, false, 0});
}
std::shared_ptr<DataLoader> WikiText2Data::test_loader() {
  if (!test_) return nullptr;
  return std::make_shared<DataLoader>(test_, DataLoaderOptions{options_.batch_size, false, false, 0});
}

}  // namespace volt::demos
