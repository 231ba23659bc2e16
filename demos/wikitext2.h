#pragma once
/// Lightning's demo dataset (`lightning.pytorch.demos.WikiText2`): a WikiText-2 text file turned into
/// one long int64 tensor of word ids, cut into blocks of `block_size` tokens. Tokenization is
/// Python's: each line (split on \n, \r\n or \r) is split on whitespace (str.split(), Unicode
/// whitespace included) and gets "<eos>" appended; ids are given in order of first appearance.
///
/// Thread-safety: a built WikiText2 is read-only, `get` may be called from any thread. A Dictionary
/// shared between splits is written only while a WikiText2 is being constructed.
#include <torch/types.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "volt/module/data.h"

namespace volt::demos {

/// Word <-> id table (Lightning's Dictionary: word2idx, idx2word).
class Dictionary {
 public:
  /// Returns the word's id, giving it the next free id if it is new.
  int64_t add_word(const std::string& word);
  /// The word's id, or -1 when absent.
  int64_t index(const std::string& word) const;
  const std::string& word(int64_t id) const { return idx2word_.at(static_cast<size_t>(id)); }
  int64_t size() const { return static_cast<int64_t>(idx2word_.size()); }
  const std::unordered_map<std::string, int64_t>& word2idx() const { return word2idx_; }
  const std::vector<std::string>& idx2word() const { return idx2word_; }

 private:
  std::unordered_map<std::string, int64_t> word2idx_;
  std::vector<std::string> idx2word_;
};

/// Splits text as Python's `for line in f: line.split() + ["<eos>"]` does and appends the ids of
/// the words (added to `dictionary` when new) to `ids`.
void tokenize_text(const std::string& text, Dictionary& dictionary, std::vector<int64_t>& ids);

class WikiText2 : public Dataset {
 public:
  /// Reads `<data_dir>/<file>` ("train.txt", "valid.txt", "test.txt"). Pass the same `dictionary`
  /// to every split so they share ids; by default the split gets a dictionary of its own.
  /// Throws DataError when the file is missing or unreadable (the message says where to get it).
  WikiText2(const std::string& data_dir, const std::string& file = "train.txt",
            std::shared_ptr<Dictionary> dictionary = nullptr, int64_t block_size = 35);

  /// len(data) // block_size - 1, as Lightning (never negative).
  int64_t size() const override;
  /// {inputs, target}: data[i*bs : (i+1)*bs] and the same shifted by one token (int64 [block_size]).
  Batch get(int64_t index) const override;

  /// Words in the (possibly shared) dictionary.
  int64_t vocab_size() const { return dictionary_->size(); }
  const std::shared_ptr<Dictionary>& dictionary() const { return dictionary_; }
  /// All token ids of the file, int64 [num_tokens].
  const torch::Tensor& data() const { return data_; }
  int64_t block_size() const { return block_size_; }
  const std::string& path() const { return path_; }

  /// Where the file can be downloaded (the pytorch/examples copy Lightning uses).
  static std::string download_url(const std::string& file);

 private:
  std::string path_;
  std::shared_ptr<Dictionary> dictionary_;
  torch::Tensor data_;
  int64_t block_size_;
};

}  // namespace volt::demos
