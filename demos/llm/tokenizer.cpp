#include "volt/demos/llm/tokenizer.h"

#include <dlfcn.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "volt/checkpoint/tensor_archive.h"
#include "volt/core/errors.h"
#include "volt/demos/llm/sentencepiece_shim.h"

namespace volt::demos {

namespace fs = std::filesystem;

namespace {

/// The offset of the first byte that is not part of valid UTF-8 (RFC 3629: no overlong forms, no
/// surrogates, nothing above U+10FFFF), or npos when all of `s` is valid.
size_t invalid_utf8_at(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf;  // the allowed range of the second byte
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      if (c == 0xe0) lo = 0xa0;
      if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      if (c == 0xf0) lo = 0x90;
      if (c == 0xf4) hi = 0x8f;
    } else {
      return i;
    }
    if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if (p[i + k] < 0x80 || p[i + k] > 0xbf) return i;
    i += len;
  }
  return std::string::npos;
}

bool is_blank(const std::string& line) {
  for (char c : line)
    if (c != ' ' && c != '\t' && c != '\v' && c != '\f') return false;
  return true;
}

/// `path` opened for reading; DataError when it is missing, a folder, or not a regular file (a FIFO
/// or a device would block or never end).
std::ifstream open_regular_file(const std::string& path, const char* what) {
  std::error_code ec;
  VOLT_CHECK(!fs::is_directory(path, ec), DataError, what, " '", path, "' is a folder, not a file");
  VOLT_CHECK(fs::exists(path, ec), DataError, what, " '", path, "' does not exist");
  VOLT_CHECK(fs::is_regular_file(path, ec), DataError, what, " '", path, "' is not a regular file");
  std::ifstream in(path, std::ios::binary);
  VOLT_CHECK(in, DataError, what, " '", path, "' cannot be read: ", std::strerror(errno));
  return in;
}

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in = open_regular_file(path, what);
  std::ostringstream buf;
  buf << in.rdbuf();
  VOLT_CHECK(!in.bad(), DataError, what, " '", path, "': read error");
  return buf.str();
}

/// Appends what a module's sink hands over to a std::string (bytes) or std::vector<int> (ids).
void append_bytes(void* ctx, const void* data, size_t n) {
  static_cast<std::string*>(ctx)->append(static_cast<const char*>(data), n);
}
void append_ints(void* ctx, const void* data, size_t n) {
  auto* v = static_cast<std::vector<int>*>(ctx);
  v->insert(v->end(), static_cast<const int*>(data), static_cast<const int*>(data) + n);
}

/// volt_sentencepiece, opened once per process (see sentencepiece_shim.h for why it is a module):
/// $VOLT_SENTENCEPIECE_MODULE, else the build's copy, else the installed one found by dlopen's
/// search (the executable's RUNPATH, LD_LIBRARY_PATH, the system's folders).
const volt_spm_api& sentencepiece() {
  static const volt_spm_api* const api = [] {
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("VOLT_SENTENCEPIECE_MODULE"); env && *env) {
      candidates.push_back(env);
    } else {
#ifdef VOLT_SENTENCEPIECE_MODULE
      std::error_code ec;
      if (fs::exists(VOLT_SENTENCEPIECE_MODULE, ec)) candidates.push_back(VOLT_SENTENCEPIECE_MODULE);
#endif
      candidates.push_back("libvolt_sentencepiece.so");
    }
    std::string errors;
    for (const auto& path : candidates) {
      void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (!handle) {
        const char* e = ::dlerror();
        errors += "\n  " + path + ": " + (e ? e : "unknown error");
        continue;
      }
      using GetApi = const volt_spm_api* (*)();
      auto get = reinterpret_cast<GetApi>(::dlsym(handle, "volt_spm_get_api"));
      const volt_spm_api* found = get ? get() : nullptr;
      // Error, not DataError: an installation fault, which no data or config change mends.
      VOLT_CHECK(found && found->version == VOLT_SPM_API_VERSION, Error, "'", path,
                 "' is not volt_sentencepiece of this volt (interface version ", found ? found->version : -1,
                 ", expected ", VOLT_SPM_API_VERSION, "): rebuild it with this volt");
      return found;  // never closed: it lives as long as the process
    }
    throw Error(detail::str_cat("the SentencePiece module (volt_sentencepiece) cannot be loaded:", errors,
                                "\nBuild the volt_sentencepiece target (it is put beside libvolt.so), install ",
                                "libsentencepiece0, or name the module in VOLT_SENTENCEPIECE_MODULE"));
  }();
  return *api;
}

}  // namespace

struct Tokenizer::Impl {
  const volt_spm_api& api = sentencepiece();
  volt_spm_processor* processor = nullptr;
  int64_t pieces = 0, unk = -1, bos = -1, eos = -1, pad = -1;
  ~Impl() {
    if (processor) api.free(processor);
  }
};

Tokenizer::Tokenizer(const std::string& model_path) : impl_(std::make_unique<Impl>()), path_(model_path) {
  const std::string bytes = read_file(model_path, "SentencePiece model");
  std::string error;
  VOLT_CHECK(impl_->api.load(bytes.data(), bytes.size(), &impl_->processor, append_bytes, &error) == 0, DataError,
             "SentencePiece model '", model_path, "' cannot be loaded (", error,
             "): it is not a SentencePiece .model file, or a damaged one");
  impl_->pieces = impl_->api.info(impl_->processor, 0);
  impl_->unk = impl_->api.info(impl_->processor, 1);
  impl_->bos = impl_->api.info(impl_->processor, 2);
  impl_->eos = impl_->api.info(impl_->processor, 3);
  impl_->pad = impl_->api.info(impl_->processor, 4);
  VOLT_CHECK(impl_->pieces > 0, DataError, "SentencePiece model '", model_path, "' has no pieces");
  fingerprint_ = detail::xxh64(bytes.data(), bytes.size());
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::vector<int64_t> Tokenizer::encode(const std::string& text, bool add_bos, bool add_eos) const {
  const size_t bad = invalid_utf8_at(text);
  VOLT_CHECK(bad == std::string::npos, DataError, "tokenizer '", path_, "': the text is not valid UTF-8 (byte ", bad,
             " of ", text.size(), ")");
  std::vector<int> pieces;
  std::string error;
  VOLT_CHECK(
      impl_->api.encode(impl_->processor, text.data(), text.size(), append_ints, &pieces, append_bytes, &error) == 0,
      DataError, "tokenizer '", path_, "': encoding failed: ", error);
  std::vector<int64_t> ids;
  ids.reserve(pieces.size() + 2);
  if (add_bos && bos_id() >= 0) ids.push_back(bos_id());
  ids.insert(ids.end(), pieces.begin(), pieces.end());
  if (add_eos && eos_id() >= 0) ids.push_back(eos_id());
  return ids;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids) const {
  std::vector<int> pieces;
  pieces.reserve(ids.size());
  for (int64_t id : ids) {
    VOLT_CHECK(id >= 0 && id < vocab_size(), DataError, "tokenizer '", path_, "': token id ", id,
               " is outside its vocabulary [0, ", vocab_size(), ")");
    pieces.push_back(static_cast<int>(id));
  }
  std::string text, error;
  VOLT_CHECK(
      impl_->api.decode(impl_->processor, pieces.data(), pieces.size(), append_bytes, &text, append_bytes, &error) == 0,
      DataError, "tokenizer '", path_, "': decoding failed: ", error);
  return text;
}

std::string Tokenizer::id_to_piece(int64_t id) const {
  VOLT_CHECK(id >= 0 && id < vocab_size(), DataError, "tokenizer '", path_, "': token id ", id,
             " is outside its vocabulary [0, ", vocab_size(), ")");
  std::string piece;
  impl_->api.id_to_piece(impl_->processor, static_cast<int>(id), append_bytes, &piece);
  return piece;
}

int64_t Tokenizer::vocab_size() const { return impl_->pieces; }
int64_t Tokenizer::bos_id() const { return impl_->bos; }
int64_t Tokenizer::eos_id() const { return impl_->eos; }
int64_t Tokenizer::pad_id() const { return impl_->pad; }
int64_t Tokenizer::unk_id() const { return impl_->unk; }

void for_each_text_line(const std::string& path,
                        const std::function<void(const std::string& line, int64_t line_number)>& fn) {
  // Streamed in 1 MiB chunks, so a corpus larger than memory can be tokenized.
  std::ifstream in = open_regular_file(path, "text file");
  std::vector<char> chunk(1 << 20);
  std::string line;
  int64_t number = 0;
  bool line_open = false;  // bytes since the last line break
  bool after_cr = false;   // the last byte was '\r': a '\n' right after it ends no further line
  auto end_line = [&] {
    ++number;
    const size_t bad = invalid_utf8_at(line);
    VOLT_CHECK(bad == std::string::npos, DataError, "text file '", path, "' line ", number, ": not valid UTF-8 (byte ",
               bad + 1, " of the line); convert the file to UTF-8");
    if (!is_blank(line)) fn(line, number);
    line.clear();
    line_open = false;
  };
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    const char* p = chunk.data();
    const char* const end = p + in.gcount();
    while (p < end) {
      if (after_cr && *p == '\n') ++p;  // the \n of a \r\n
      after_cr = false;
      const char* stop = std::find_if(p, end, [](char c) { return c == '\n' || c == '\r'; });
      line.append(p, stop);
      line_open = line_open || stop > p;
      if (stop == end) break;
      after_cr = *stop == '\r';
      end_line();
      p = stop + 1;
    }
  }
  VOLT_CHECK(!in.bad(), DataError, "text file '", path, "': read error after line ", number);
  if (line_open) end_line();  // a last line without a line break
}

void train_tokenizer(const std::vector<std::string>& text_files, const std::string& model_path,
                     const TokenizerTrainOptions& options) {
  VOLT_CHECK(options.vocab_size >= 260, ConfigError, "tokenizer vocab_size must be >= 260 (256 byte pieces, ",
             "<unk>, <s>, </s> and at least one more), got ", options.vocab_size);
  VOLT_CHECK(options.num_threads >= 1, ConfigError, "tokenizer num_threads must be >= 1, got ", options.num_threads);
  VOLT_CHECK(!text_files.empty(), ConfigError, "train_tokenizer: no text files given");
  std::vector<std::string> lines;
  for (const auto& file : text_files)
    for_each_text_line(file, [&](const std::string& line, int64_t) { lines.push_back(line); });
  VOLT_CHECK(!lines.empty(), DataError, "cannot train a tokenizer: the text files hold no line with text");

  // Llama's trainer spec (its tokenizer.model's trainer_spec), on sentences from memory.
  const std::vector<std::pair<std::string, std::string>> spec = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"byte_fallback", "true"},
      {"split_digits", "true"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"allow_whitespace_only_pieces", "true"},
      {"character_coverage", "0.99995"},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
      {"num_threads", std::to_string(options.num_threads)},
      {"minloglevel", "1"},  // SentencePiece's progress log off; its errors come back in the status
  };
  std::vector<const char*> keys, values, line_data;
  std::vector<size_t> line_sizes;
  for (const auto& [k, v] : spec) {
    keys.push_back(k.c_str());
    values.push_back(v.c_str());
  }
  for (const auto& line : lines) {
    line_data.push_back(line.data());
    line_sizes.push_back(line.size());
  }
  std::string model, error;
  const int rc = sentencepiece().train(keys.data(), values.data(), keys.size(), line_data.data(), line_sizes.data(),
                                       lines.size(), append_bytes, &model, append_bytes, &error);
  VOLT_CHECK(rc == 0, DataError, "training a SentencePiece tokenizer of ", options.vocab_size, " pieces on ",
             lines.size(), " lines failed: ", error);

  try {  // creates the folder
    detail::atomic_write(model_path, model.data(), model.size());
  } catch (const CheckpointError& e) {
    throw DataError(e.what());
  }
}

}  // namespace volt::demos
