#pragma once
/// The LLM demo's tokenizer: a SentencePiece model (Debian's libsentencepiece), as Llama's. Loads a
/// `.model` file (the serialized ModelProto that Python's `sentencepiece` and Hugging Face's
/// LlamaTokenizer read too) and trains new ones with Llama's recipe (BPE, byte fallback, digits
/// split, no normalization: decode(encode(text)) == text for any valid UTF-8).
///
///   Tokenizer tok("tokenizer.model");
///   auto ids = tok.encode("Hello world", /*add_bos=*/true);   // {1, ...}
///   std::string text = tok.decode(ids);                          // "Hello world" (control ids dropped)
///
/// Ownership: a Tokenizer owns its model (SentencePiece's processor, behind a pointer, so this header
/// needs no SentencePiece headers). Thread-safety: after construction every call is const and may run
/// from several threads at once. Movable, not copyable.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace volt::demos {

/// How train_tokenizer() builds a model. The fixed part is Llama's trainer spec: model_type bpe,
/// byte_fallback, split_digits, normalization "identity", remove_extra_whitespaces false,
/// allow_whitespace_only_pieces, unk 0, bos 1, eos 2, no pad; character_coverage 0.99995.
struct TokenizerTrainOptions {
  /// Pieces in the model (>= 259 + a few: the 256 byte pieces and <unk>, <s>, </s> are among them).
  int64_t vocab_size = 8000;
  /// Threads of SentencePiece's trainer: the pieces do not depend on it, but the model records it
  /// (its trainer_spec), so the file's bytes, and with them the tokenizer's fingerprint, do.
  int64_t num_threads = 2;
};

class Tokenizer {
 public:
  /// Loads a SentencePiece model file. DataError naming the file when it is missing, unreadable or
  /// not a SentencePiece model; Error when the SentencePiece module cannot be loaded (an
  /// installation fault: see VOLT_SENTENCEPIECE_MODULE).
  explicit Tokenizer(const std::string& model_path);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  /// Token ids of `text` (UTF-8; DataError when it is not), with bos_id() before and eos_id() after
  /// when asked. Llama's convention: encode(text, true) for a prompt.
  std::vector<int64_t> encode(const std::string& text, bool add_bos = false, bool add_eos = false) const;
  /// The text of `ids`; control ids (<s>, </s>) decode to nothing, byte pieces to their bytes.
  /// DataError naming the id when one is outside [0, vocab_size()).
  std::string decode(const std::vector<int64_t>& ids) const;
  /// The piece of one id ("▁the", "<0x0A>", "<s>"), for logs; DataError when out of range.
  std::string id_to_piece(int64_t id) const;

  /// Pieces in the model (the model's vocab_size).
  int64_t vocab_size() const;
  /// Special ids; -1 when the model has none (pad_id() for Llama's models).
  int64_t bos_id() const;
  int64_t eos_id() const;
  int64_t pad_id() const;
  int64_t unk_id() const;
  /// XXH64 of the model file's bytes: token files record it, so a token file is only read with the
  /// tokenizer that wrote it.
  uint64_t fingerprint() const { return fingerprint_; }
  const std::string& path() const { return path_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string path_;
  uint64_t fingerprint_ = 0;
};

/// Calls `fn(line)` for every line of the UTF-8 text file at `path` that holds more than ASCII
/// whitespace, without its line break (universal newlines: \n, \r\n and \r, as Python's text
/// files), in order; `line_number` counts from 1 over all lines. DataError naming the file and
/// line when a line is not valid UTF-8, and when the file is missing or unreadable. Tokenizer
/// training and token files read text through this one function, so both see the same lines.
void for_each_text_line(const std::string& path,
                        const std::function<void(const std::string& line, int64_t line_number)>& fn);

/// Trains a SentencePiece model on the lines for_each_text_line gives of `text_files` and writes it
/// to `model_path` atomically (a temporary file in the same folder, fsync, rename), creating the
/// folder. Deterministic: the same files and options give the same bytes (as Python's
/// `spm.SentencePieceTrainer.train` with the same spec, see tests/golden/make_llm_data_golden.py).
/// DataError when the text cannot be read, holds no line, or has too few distinct characters for
/// `vocab_size`; ConfigError for a vocab_size below 260 or num_threads below 1.
void train_tokenizer(const std::vector<std::string>& text_files, const std::string& model_path,
                     const TokenizerTrainOptions& options = {});

}  // namespace volt::demos
