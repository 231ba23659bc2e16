#include "volt/demos/llm/token_data.h"

#include <algorithm>
#include <filesystem>

#include "volt/checkpoint/tensor_archive.h"
#include "volt/core/download.h"
#include "volt/core/errors.h"
#include "volt/demos/llm/token_file.h"
#include "volt/demos/llm/tokenizer.h"

namespace volt::demos {

namespace fs = std::filesystem;

bool is_token_file_name(const std::string& file) {
  return file.size() > 4 && file.compare(file.size() - 4, 4, ".tok") == 0;
}

void TokenDataOptions::validate(const std::string& prefix) const {
  auto key = [&](const char* field) { return prefix.empty() ? std::string(field) : prefix + "." + field; };
  VOLT_CHECK(!train_file.empty(), ConfigError, "config key '", key("train_file"), "': must not be empty");
  VOLT_CHECK(!cache_dir.empty(), ConfigError, "config key '", key("cache_dir"),
             "': must not be empty (the folder for the tokenizer and the token files)");
  VOLT_CHECK(tokenizer_vocab_size >= 260, ConfigError, "config key '", key("tokenizer_vocab_size"),
             "': must be >= 260 (256 byte pieces, <unk>, <s>, </s> and more), got ", tokenizer_vocab_size);
  VOLT_CHECK(tokenizer_vocab_size <= (int64_t{1} << 32), ConfigError, "config key '", key("tokenizer_vocab_size"),
             "': ", tokenizer_vocab_size, " is more than token files hold (2^32)");
  VOLT_CHECK(block_size >= 1, ConfigError, "config key '", key("block_size"), "': must be >= 1, got ", block_size);
  // A window is block_size + 1 tokens, indexed in int64 and batched as [batch_size, block_size].
  constexpr int64_t kMaxBlock = int64_t{1} << 32;
  VOLT_CHECK(block_size <= kMaxBlock, ConfigError, "config key '", key("block_size"), "': ", block_size,
             " tokens a sequence is more than ", kMaxBlock, "; is it a typo?");
  VOLT_CHECK(batch_size >= 1, ConfigError, "config key '", key("batch_size"), "': must be >= 1, got ", batch_size);
  VOLT_CHECK(num_workers >= 0, ConfigError, "config key '", key("num_workers"), "': must be >= 0, got ", num_workers);
  if (is_token_file_name(train_file) && tokenizer.empty()) {  // then no tokenizer is trained
    for (const auto& [field, file] : {std::pair<const char*, const std::string&>{"val_file", val_file},
                                      std::pair<const char*, const std::string&>{"test_file", test_file}})
      VOLT_CHECK(file.empty() || is_token_file_name(file), ConfigError, "config key '", key(field), "': '", file,
                 "' is text, but train_file '", train_file,
                 "' is a token file, so no tokenizer is trained from it: ", "name one in '", key("tokenizer"),
                 "', or give token files (.tok) for every split");
  }
}

std::string TokenDataOptions::tokenizer_path() const {
  if (!tokenizer.empty()) return tokenizer;
  if (is_token_file_name(train_file)) return "";
  // Named after the text's absolute path too: another corpus of the same file name gets its own.
  const std::string source = fs::absolute(source_path(train_file)).lexically_normal().string();
  return (fs::path(cache_dir) /
          (fs::path(train_file).filename().string() + ".sp" + std::to_string(tokenizer_vocab_size) + "." +
           detail::hex64(detail::xxh64(source.data(), source.size())) + ".model"))
      .string();
}

std::string TokenDataOptions::source_path(const std::string& file) const {
  return (fs::path(data_dir) / file).string();
}

TokenData::TokenData(TokenDataOptions options) : options_(std::move(options)) { options_.validate(); }

TokenData::~TokenData() = default;

std::string TokenData::token_file_path(const std::string& file) const {
  VOLT_CHECK(tokenizer_ != nullptr, ConfigError, "TokenData: the token files are named after the tokenizer: call ",
             "prepare_data() or setup() first");
  // The key: the tokenizer's bytes, the <s>/</s> choice and where the text is, so that other
  // tokenizers, and texts of one name in other folders, keep files of their own.
  const uint64_t parts[2] = {tokenizer_->fingerprint(), (options_.add_bos ? TokenFileHeader::kBosPerLine : 0u) |
                                                            (options_.add_eos ? TokenFileHeader::kEosPerLine : 0u)};
  std::string keyed(reinterpret_cast<const char*>(parts), sizeof(parts));
  keyed += fs::absolute(options_.source_path(file)).lexically_normal().string();
  const std::string key = detail::hex64(detail::xxh64(keyed.data(), keyed.size()));
  return (fs::path(options_.cache_dir) / (fs::path(file).filename().string() + "." + key + ".tok")).string();
}

void TokenData::load_tokenizer() {
  if (tokenizer_) return;
  const std::string path = options_.tokenizer_path();
  if (path.empty()) return;  // token files only
  if (!fs::exists(path)) {
    VOLT_CHECK(options_.tokenizer.empty(), DataError, "tokenizer '", path,
               "' (data.tokenizer) does not exist; leave data.tokenizer empty to train one on data.train_file");
    TokenizerTrainOptions train;
    train.vocab_size = options_.tokenizer_vocab_size;
    train_tokenizer({options_.source_path(options_.train_file)}, path, train);
  }
  auto tokenizer = std::make_shared<Tokenizer>(path);
  // Without the piece the ids would run line into line, under a header that says otherwise.
  VOLT_CHECK(!options_.add_bos || tokenizer->bos_id() >= 0, DataError, "data.add_bos is true but the tokenizer '", path,
             "' has no <s> piece; set data.add_bos: false, or use a tokenizer that has one");
  VOLT_CHECK(!options_.add_eos || tokenizer->eos_id() >= 0, DataError, "data.add_eos is true but the tokenizer '", path,
             "' has no </s> piece; set data.add_eos: false, or use a tokenizer that has one");
  tokenizer_ = std::move(tokenizer);
}

std::shared_ptr<const TokenFile> TokenData::split_file(const std::string& file) {
  const std::string source = options_.source_path(file);
  if (is_token_file_name(file)) {
    auto tokens = std::make_shared<const TokenFile>(source);
    if (tokenizer_) {
      const auto& h = tokens->header();
      VOLT_CHECK(h.tokenizer == 0 || h.tokenizer == tokenizer_->fingerprint(), DataError, "token file '", source,
                 "' was written by another tokenizer than '", tokenizer_->path(), "' (XXH64 ",
                 detail::hex64(h.tokenizer), ", not ", detail::hex64(tokenizer_->fingerprint()), ")");
      VOLT_CHECK(h.vocab_size <= tokenizer_->vocab_size(), DataError, "token file '", source, "' has vocab_size ",
                 h.vocab_size, ", more than the tokenizer '", tokenizer_->path(), "' (", tokenizer_->vocab_size(), ")");
    }
    return tokens;
  }
  VOLT_CHECK(tokenizer_ != nullptr, ConfigError, "data: '", file, "' is a text file and no tokenizer is named ",
             "(data.tokenizer)");
  const std::string path = token_file_path(file);
  const SourceStamp stamp = SourceStamp::of(source);
  if (fs::exists(path)) {
    try {
      auto tokens = std::make_shared<const TokenFile>(path);
      const auto& h = tokens->header();
      // Also what the name's key holds: a header that disagrees is a damaged (or edited) file.
      const uint32_t flags = (options_.add_bos ? TokenFileHeader::kBosPerLine : 0u) |
                             (options_.add_eos ? TokenFileHeader::kEosPerLine : 0u);
      if (h.tokenizer == tokenizer_->fingerprint() && SourceStamp{h.source_size, h.source_mtime_ns} == stamp &&
          h.vocab_size == tokenizer_->vocab_size() && h.flags == flags)
        return tokens;
    } catch (const DataError&) {  // damaged: made again below
    }
  }
  write_token_file(source, *tokenizer_, options_.add_bos, options_.add_eos, path);
  return std::make_shared<const TokenFile>(path);
}

void TokenData::prepare_data() {
  if (!options_.url.empty()) {
    std::string base = options_.url;
    if (base.back() != '/') base += '/';
    for (const std::string& file : {options_.train_file, options_.val_file, options_.test_file}) {
      if (file.empty()) continue;
      const std::string path = options_.source_path(file);
      if (!fs::exists(path)) download_file(base + file, path);
    }
  }
  // Every named file before any work: a missing val_file is not found after training a tokenizer.
  for (const auto& [key, file] : {std::pair<const char*, const std::string&>{"train_file", options_.train_file},
                                  {"val_file", options_.val_file},
                                  {"test_file", options_.test_file}}) {
    if (file.empty()) continue;
    const std::string path = options_.source_path(file);
    std::error_code ec;
    VOLT_CHECK(fs::is_regular_file(path, ec), DataError, "data.", key, ": '", path, "' ",
               fs::exists(path, ec) ? "is not a regular file" : "does not exist");
  }
  load_tokenizer();
  for (const std::string& file : {options_.train_file, options_.val_file, options_.test_file})
    if (!file.empty()) split_file(file);
}

void TokenData::setup(const std::string&) {
  if (train_) return;
  load_tokenizer();
  auto load = [&](const std::string& file) -> std::shared_ptr<TokenWindows> {
    if (file.empty()) return nullptr;
    return std::make_shared<TokenWindows>(split_file(file), options_.block_size);
  };
  auto train = load(options_.train_file);
  val_ = load(options_.val_file);
  test_ = options_.test_file == options_.val_file ? val_ : load(options_.test_file);
  train_ = std::move(train);
}

std::shared_ptr<DataLoader> TokenData::eval_loader(const std::shared_ptr<TokenWindows>& split) const {
  if (!split) return nullptr;
  DataLoaderOptions o{options_.batch_size, false, false, 0};
  o.num_workers = options_.num_workers;
  return std::make_shared<DataLoader>(split, o);
}

std::shared_ptr<DataLoader> TokenData::train_dataloader() {
  VOLT_CHECK(train_ != nullptr, ConfigError, "TokenData: train_dataloader() before setup()");
  DataLoaderOptions o{options_.batch_size, options_.shuffle, false, static_cast<uint64_t>(options_.seed)};
  o.num_workers = options_.num_workers;
  return std::make_shared<DataLoader>(train_, o);
}

DataLoaders TokenData::val_dataloader() {
  if (!val_) return {};
  return {eval_loader(val_)};
}

DataLoaders TokenData::test_dataloader() {
  VOLT_CHECK(test_ != nullptr, ConfigError, "data: no test_file configured for test (set data.test_file)");
  return {eval_loader(test_)};
}

DataLoaders TokenData::predict_dataloader() {
  VOLT_CHECK(test_ != nullptr, ConfigError, "data: no test_file configured; predict reads it (set data.test_file)");
  return {eval_loader(test_)};
}

YAML::Node TokenData::hparams() const { return options_to_yaml(options_); }

int64_t TokenData::vocab_size() const {
  VOLT_CHECK(train_ != nullptr, ConfigError, "TokenData: the vocabulary is known after setup()");
  if (tokenizer_) return tokenizer_->vocab_size();
  int64_t v = 0;
  for (const auto* split : {train_.get(), val_.get(), test_.get()})
    if (split) v = std::max(v, split->file().header().vocab_size);
  return v;
}

}  // namespace volt::demos
