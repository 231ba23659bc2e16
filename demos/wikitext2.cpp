#include "volt/demos/wikitext2.h"

#include <torch/torch.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "volt/core/errors.h"

namespace volt::demos {

namespace fs = std::filesystem;

int64_t Dictionary::add_word(const std::string& word) {
  auto [it, inserted] = word2idx_.emplace(word, static_cast<int64_t>(idx2word_.size()));
  if (inserted) idx2word_.push_back(word);
  return it->second;
}

int64_t Dictionary::index(const std::string& word) const {
  auto it = word2idx_.find(word);
  return it == word2idx_.end() ? -1 : it->second;
}

namespace {

/// Byte length of the whitespace character (Python's str.isspace) starting at p, or 0.
size_t whitespace_len(const unsigned char* p, const unsigned char* end) {
  const unsigned char c = p[0];
  if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f)) return 1;
  if (c < 0xc2) return 0;
  const size_t left = static_cast<size_t>(end - p);
  if (c == 0xc2 && left >= 2) return (p[1] == 0x85 || p[1] == 0xa0) ? 2 : 0;  // U+0085, U+00A0
  if (left < 3) return 0;
  if (c == 0xe1) return (p[1] == 0x9a && p[2] == 0x80) ? 3 : 0;  // U+1680
  if (c == 0xe2 && p[1] == 0x80)                                 // U+2000..200A, 2028, 2029, 202F
    return ((p[2] >= 0x80 && p[2] <= 0x8a) || p[2] == 0xa8 || p[2] == 0xa9 || p[2] == 0xaf) ? 3 : 0;
  if (c == 0xe2 && p[1] == 0x81) return p[2] == 0x9f ? 3 : 0;    // U+205F
  if (c == 0xe3) return (p[1] == 0x80 && p[2] == 0x80) ? 3 : 0;  // U+3000
  return 0;
}

}  // namespace

void tokenize_text(const std::string& text, Dictionary& dictionary, std::vector<int64_t>& ids) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = p + text.size();
  std::string word;
  bool line_open = false;  // characters seen since the last line break
  auto flush_word = [&] {
    if (word.empty()) return;
    ids.push_back(dictionary.add_word(word));
    word.clear();
  };
  auto end_line = [&] {
    flush_word();
    ids.push_back(dictionary.add_word("<eos>"));
    line_open = false;
  };
  while (p < end) {
    if (*p == '\n' || *p == '\r') {  // universal newlines: \n, \r\n, \r
      const bool crlf = *p == '\r' && p + 1 < end && p[1] == '\n';
      p += crlf ? 2 : 1;
      end_line();
      continue;
    }
    line_open = true;
    if (size_t n = whitespace_len(p, end)) {
      flush_word();
      p += n;
    } else {
      word.push_back(static_cast<char>(*p++));
    }
  }
  if (line_open) end_line();  // a last line without a line break
}

std::string WikiText2::download_url(const std::string& file) {
  return "https://raw.githubusercontent.com/pytorch/examples/main/word_language_model/data/wikitext-2/" + file;
}

WikiText2::WikiText2(const std::string& data_dir, const std::string& file, std::shared_ptr<Dictionary> dictionary,
                     int64_t block_size)
    : path_((fs::path(data_dir) / file).string()),
      dictionary_(dictionary ? std::move(dictionary) : std::make_shared<Dictionary>()),
      block_size_(block_size) {
  VOLT_CHECK(block_size_ >= 1, ConfigError, "WikiText2: block_size must be >= 1, got ", block_size_);
  std::error_code ec;
  VOLT_CHECK(!fs::is_directory(path_, ec), DataError, "WikiText-2 file '", path_,
             "' is a folder; data.train_file, val_file and test_file name text files inside data.data_dir");
  VOLT_CHECK(fs::is_regular_file(path_, ec), DataError, "WikiText-2 file '", path_, "' does not exist: download ",
             download_url(file), " into '", data_dir,
             "' (or set data.url to fetch it), or use the offline copy ../shared/data/wikitext-2, which has "
             "valid.txt and test.txt");
  std::ifstream in(path_, std::ios::binary);
  VOLT_CHECK(in, DataError, "WikiText-2 file '", path_, "' cannot be read: ", std::strerror(errno));
  std::ostringstream buf;
  buf << in.rdbuf();
  VOLT_CHECK(!in.bad(), DataError, "WikiText-2 file '", path_, "': read error");
  std::vector<int64_t> ids;
  tokenize_text(buf.str(), *dictionary_, ids);
  data_ = torch::tensor(ids, torch::kLong);
  if (ids.empty()) data_ = torch::empty({0}, torch::kLong);
}

int64_t WikiText2::size() const { return std::max<int64_t>(0, data_.numel() / block_size_ - 1); }

Batch WikiText2::get(int64_t index) const {
  VOLT_CHECK(index >= 0 && index < size(), DataError, "WikiText2 '", path_, "': index ", index, " out of range [0, ",
             size(), ")");
  const int64_t start = index * block_size_, stop = start + block_size_;
  return {data_.slice(0, start, stop), data_.slice(0, start + 1, stop + 1)};
}

}  // namespace volt::demos
