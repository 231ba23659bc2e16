#pragma once
/// The LLM demo's LightningDataModule: text files tokenized once into token files (token_file.h),
/// read as windows of block_size + 1 tokens, batched as {"input_ids": [B, T], "labels": [B, T]}.
///
///   data:
///     data_dir: ../shared/data/wikitext-2   # the text files
///     train_file: valid.txt                 # a ".tok" name is a ready token file, used as it is
///     val_file: test.txt                    # "" for none
///     cache_dir: runs/llm-cache             # the tokenizer and token files made from the text
///     tokenizer: ""                         # a SentencePiece .model; "": trained on train_file
///     block_size: 256
///
/// Files (prepare_data on global rank 0; setup on every rank does the same for whatever is still
/// missing, so ranks on a host without rank 0's files make their own):
///  - tokenizer "" trains `<cache_dir>/<train file name>.sp<tokenizer_vocab_size>.<key>.model`
///    once, the key an XXH64 of the text's absolute path (kept: delete it to train again); a
///    tokenizer that is named must exist.
///  - each text split becomes `<cache_dir>/<file name>.<key>.tok`, the key an XXH64 of the
///    tokenizer's bytes, the <s>/</s> choice and the text's absolute path, so runs with other
///    tokenizers (or texts of one name in other folders) keep their own files in one cache_dir. It
///    is made again when it is damaged, or when the text file's size or modification time is no
///    longer the one it recorded.
///
/// Ownership: the data module owns its tokenizer and splits; the loaders share the splits.
/// Thread-safety: as LightningDataModule (hooks from the training thread).
#include <memory>
#include <string>

#include "volt/core/options.h"
#include "volt/data/data_module.h"
#include "volt/module/data.h"

namespace volt::demos {

class Tokenizer;
class TokenFile;
class TokenWindows;

struct TokenDataOptions {
  std::string data_dir = "../shared/data/wikitext-2";
  std::string train_file = "valid.txt";  // train.txt is not shipped offline; valid.txt stands in
  std::string val_file = "test.txt";
  std::string test_file = "test.txt";
  std::string url;  // base URL to fetch missing text files from (http, https or file)
  std::string cache_dir = "runs/llm-cache";
  std::string tokenizer;                // a SentencePiece .model; empty: trained on train_file
  int64_t tokenizer_vocab_size = 8000;  // pieces of a tokenizer trained here
  bool add_bos = true;                  // <s> before each line of text
  bool add_eos = true;                  // </s> after each line of text
  int64_t block_size = 256;             // T: tokens per sample
  int64_t batch_size = 8;
  bool shuffle = true;
  int64_t seed = 42;
  int64_t num_workers = 0;

  template <class V>
  void visit(V& v) {
    v("data_dir", data_dir)("train_file", train_file)("val_file", val_file)("test_file", test_file)("url", url)(
        "cache_dir", cache_dir)("tokenizer", tokenizer)("tokenizer_vocab_size", tokenizer_vocab_size)(
        "add_bos", add_bos)("add_eos", add_eos)("block_size", block_size)("batch_size", batch_size)("shuffle", shuffle)(
        "seed", seed)("num_workers", num_workers);
  }
  /// Throws ConfigError naming `<prefix>.<field>`.
  void validate(const std::string& prefix = "data") const;
  /// The tokenizer's file: `tokenizer`, or the one trained on train_file in cache_dir; "" when
  /// there is none (train_file is a token file and no tokenizer is named). `volt generate` reads
  /// this from a run's saved data options.
  std::string tokenizer_path() const;
  /// Where a split's file is read from: `<data_dir>/<file>` (an absolute `file` as it is).
  std::string source_path(const std::string& file) const;
};

/// True when `file` names a ready token file (it ends in ".tok").
bool is_token_file_name(const std::string& file);

class TokenData : public LightningDataModule {
 public:
  using Options = TokenDataOptions;

  /// Validates the options; reads nothing yet.
  explicit TokenData(TokenDataOptions options);
  ~TokenData() override;

  /// Fetches missing text files from `url`, trains the tokenizer if it is ours and absent, and
  /// writes every split's token file that is missing or stale.
  void prepare_data() override;
  /// The same file steps for anything still missing, then opens the tokenizer and the splits, once
  /// (later calls keep them). DataError when a file is missing, damaged, made by another tokenizer,
  /// or holds fewer than block_size + 1 tokens.
  void setup(const std::string& stage) override;
  std::shared_ptr<DataLoader> train_dataloader() override;
  /// None when val_file is empty.
  DataLoaders val_dataloader() override;
  /// ConfigError when test_file is empty.
  DataLoaders test_dataloader() override;
  /// The test split, in order.
  DataLoaders predict_dataloader() override;
  YAML::Node hparams() const override;

  /// After setup (ConfigError before): the tokenizer's vocabulary, or for token files without a
  /// tokenizer the largest vocab_size their headers declare. The CLI links it to model.vocab_size.
  int64_t vocab_size() const;
  /// After setup: the tokenizer; nullptr when the splits are token files and none is named.
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  /// The token file a text split is tokenized into (needs the tokenizer: after setup or prepare_data).
  std::string token_file_path(const std::string& file) const;
  const TokenDataOptions& options() const { return options_; }
  const std::shared_ptr<TokenWindows>& train_split() const { return train_; }
  const std::shared_ptr<TokenWindows>& val_split() const { return val_; }
  const std::shared_ptr<TokenWindows>& test_split() const { return test_; }

 private:
  /// Loads (training it first if it is ours and absent) the tokenizer into tokenizer_, unless loaded.
  void load_tokenizer();
  /// The token file of split `file`, written first when it is a text file whose token file is
  /// missing or stale.
  std::shared_ptr<const TokenFile> split_file(const std::string& file);
  std::shared_ptr<DataLoader> eval_loader(const std::shared_ptr<TokenWindows>& split) const;

  TokenDataOptions options_;
  std::shared_ptr<Tokenizer> tokenizer_;
  std::shared_ptr<TokenWindows> train_, val_, test_;
};

}  // namespace volt::demos
