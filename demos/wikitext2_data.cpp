#include "volt/demos/wikitext2_data.h"

#include <filesystem>

#include "volt/core/download.h"
#include "volt/core/errors.h"
#include "volt/demos/transformer.h"
#include "volt/demos/wikitext2.h"

namespace volt::demos {

namespace fs = std::filesystem;

void WikiText2DataOptions::validate(const std::string& prefix) const {
  auto key = [&](const char* field) { return prefix.empty() ? std::string(field) : prefix + "." + field; };
  VOLT_CHECK(block_size >= 1, ConfigError, "config key '", key("block_size"), "': must be >= 1, got ", block_size);
  VOLT_CHECK(block_size <= kMaxSequenceLength, ConfigError, "config key '", key("block_size"), "': ", block_size,
             " exceeds the demo model's ", kMaxSequenceLength, " positions");
  VOLT_CHECK(batch_size >= 1, ConfigError, "config key '", key("batch_size"), "': must be >= 1, got ", batch_size);
  VOLT_CHECK(!train_file.empty(), ConfigError, "config key '", key("train_file"), "': must not be empty");
}

WikiText2Data::WikiText2Data(WikiText2DataOptions options) : options_(std::move(options)) { options_.validate(); }

WikiText2Data::~WikiText2Data() = default;

void WikiText2Data::prepare_data() {
  if (options_.url.empty()) return;
  std::string base = options_.url;
  if (base.back() != '/') base += '/';
  for (const std::string& file : {options_.train_file, options_.val_file, options_.test_file}) {
    if (file.empty()) continue;
    const std::string path = (fs::path(options_.data_dir) / file).string();
    if (!fs::exists(path)) download_file(base + file, path);
  }
}

void WikiText2Data::setup(const std::string&) {
  if (dictionary_) return;
  auto dictionary = std::make_shared<Dictionary>();
  auto load = [&](const std::string& file) {
    return std::make_shared<WikiText2>(options_.data_dir, file, dictionary, options_.block_size);
  };
  // One vocabulary in a fixed order (train, val, test), so every rank and stage gets the same ids.
  auto train = load(options_.train_file);
  auto val = options_.val_file.empty() ? nullptr : load(options_.val_file);
  auto test = options_.test_file.empty() ? nullptr : load(options_.test_file);
  train_ = std::move(train);
  val_ = std::move(val);
  test_ = std::move(test);
  dictionary_ = std::move(dictionary);
}

void WikiText2Data::ensure_setup() {
  if (dictionary_) return;
  prepare_data();
  setup("fit");
}

std::shared_ptr<DataLoader> WikiText2Data::eval_loader(const std::shared_ptr<WikiText2>& split) const {
  if (!split) return nullptr;
  return std::make_shared<DataLoader>(split, DataLoaderOptions{options_.batch_size, false, false, 0});
}

std::shared_ptr<DataLoader> WikiText2Data::train_dataloader() {
  VOLT_CHECK(train_ != nullptr, ConfigError, "WikiText2Data: train_dataloader() before setup()");
  return std::make_shared<DataLoader>(
      train_, DataLoaderOptions{options_.batch_size, options_.shuffle, false, static_cast<uint64_t>(options_.seed)});
}

DataLoaders WikiText2Data::val_dataloader() {
  if (!val_) return {};
  return {eval_loader(val_)};
}

DataLoaders WikiText2Data::test_dataloader() {
  VOLT_CHECK(test_ != nullptr, ConfigError, "data: no test_file configured for test (set data.test_file)");
  return {eval_loader(test_)};
}

DataLoaders WikiText2Data::predict_dataloader() {
  VOLT_CHECK(test_ != nullptr, ConfigError, "data: no test_file configured; predict reads it (set data.test_file)");
  return {eval_loader(test_)};
}

YAML::Node WikiText2Data::hparams() const { return options_to_yaml(options_); }

int64_t WikiText2Data::num_words() const {
  VOLT_CHECK(dictionary_ != nullptr, ConfigError, "WikiText2Data: the vocabulary exists after setup()");
  return dictionary_->size();
}

int64_t WikiText2Data::vocab_size() {
  ensure_setup();
  return dictionary_->size();
}

std::shared_ptr<DataLoader> WikiText2Data::train_loader() {
  ensure_setup();
  return train_dataloader();
}

std::shared_ptr<DataLoader> WikiText2Data::val_loader() {
  ensure_setup();
  return eval_loader(val_);
}

std::shared_ptr<DataLoader> WikiText2Data::test_loader() {
  ensure_setup();
  return eval_loader(test_);
}

}  // namespace volt::demos
