#pragma once
/// Token files: a text file tokenized once, stored as a flat array of token ids that training reads
/// window by window without loading it whole.
///
/// Format (little-endian; a 64-byte header, then the ids):
///
///   offset  type      field
///   0       char[8]   magic "VOLTTOK1" (the 1 is the format version)
///   8       u32       token_bytes: 2 (uint16 ids, when vocab_size <= 65536) or 4 (uint32)
///   12      u32       flags: 1 = <s> before each line, 2 = </s> after each line
///   16      u64       num_tokens
///   24      u64       vocab_size: every id is below it
///   32      u64       tokenizer: XXH64 of the SentencePiece model file that wrote it (0: unknown)
///   40      u64       source_size: bytes of the text file it was made from (0: unknown)
///   48      i64       source_mtime_ns: its modification time, ns since the epoch (0: unknown)
///   56      u64       reserved, 0
///   64      ids       num_tokens * token_bytes bytes, nothing after them
///
/// In Python: `np.memmap(path, dtype="<u2" or "<u4", mode="r", offset=64)`
/// (demos/llm/reference/token_file.py reads and writes them).
///
/// A text file becomes tokens line by line (for_each_text_line: blank lines skipped): each line is
/// encoded on its own, with <s> before it and </s> after it as the flags say (Llama's tokenizer adds
/// <s> to each text it encodes; </s> marks where a text ends).
///
/// Thread-safety: a TokenFile and a TokenWindows are read-only once built; read()/get() may run from
/// several threads at once (pread, no shared offset).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "volt/module/data.h"

namespace volt::demos {

class Tokenizer;

/// The header of a token file.
struct TokenFileHeader {
  static constexpr int64_t kBytes = 64;
  static constexpr uint32_t kBosPerLine = 1;
  static constexpr uint32_t kEosPerLine = 2;
  uint32_t token_bytes = 2;
  uint32_t flags = 0;
  int64_t num_tokens = 0;
  int64_t vocab_size = 0;
  uint64_t tokenizer = 0;
  int64_t source_size = 0;
  int64_t source_mtime_ns = 0;
};

/// The stamp a token file records of its text file: its size and modification time (DataError when
/// the file cannot be stat'ed).
struct SourceStamp {
  int64_t size = 0;
  int64_t mtime_ns = 0;
  static SourceStamp of(const std::string& path);
  bool operator==(const SourceStamp& o) const { return size == o.size && mtime_ns == o.mtime_ns; }
};

/// Tokenizes the text file `text_path` with `tokenizer` (the flags as above) into a token file at
/// `token_path`, written atomically (a temporary file beside it, fsync, rename; the folder is
/// created): a reader never sees a partial file and two writers of the same file leave one whole
/// copy. Returns its header. DataError when the text cannot be read or is not UTF-8 (naming the
/// line), when it holds no token, or when writing fails (a full disk; the temporary file is removed).
TokenFileHeader write_token_file(const std::string& text_path, const Tokenizer& tokenizer, bool add_bos, bool add_eos,
                                 const std::string& token_path);

/// An open token file. The constructor reads and checks the header and the file's size; the ids
/// are read on demand.
class TokenFile {
 public:
  /// DataError naming the file when it is missing, is not a token file (magic), has an unknown
  /// version or token width, or its size is not 64 + num_tokens * token_bytes (a truncated or
  /// padded file).
  explicit TokenFile(const std::string& path);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const TokenFileHeader& header() const { return header_; }
  int64_t num_tokens() const { return header_.num_tokens; }
  const std::string& path() const { return path_; }
  /// Ids [start, start + count) as int64, into `out` (count elements). DataError when the range is
  /// outside the file, when the file shrank since it was opened, or when an id is not below the
  /// header's vocab_size (a damaged file).
  void read(int64_t start, int64_t count, int64_t* out) const;
  /// The same as a tensor (int64 [count]).
  torch::Tensor read(int64_t start, int64_t count) const;

 private:
  std::string path_;
  int fd_ = -1;
  TokenFileHeader header_;
};

/// Training samples from a token file: window i holds tokens [i*T, i*T + T + 1) (T = block_size;
/// consecutive windows share one token, so every token but the first is a label exactly once), as
/// {"input_ids": w[:-1], "labels": w[1:]} (int64 [T] each; the loader stacks them to [B, T]).
/// size() is (num_tokens - 1) / T; the tail that fills no window is not used.
class TokenWindows : public Dataset {
 public:
  /// ConfigError when block_size < 1; DataError (naming the file and both counts) when the file
  /// holds fewer than block_size + 1 tokens, i.e. not one window.
  TokenWindows(std::shared_ptr<const TokenFile> file, int64_t block_size);
  int64_t size() const override;
  Batch get(int64_t index) const override;

  int64_t block_size() const { return block_size_; }
  const TokenFile& file() const { return *file_; }

 private:
  std::shared_ptr<const TokenFile> file_;
  int64_t block_size_;
};

}  // namespace volt::demos
