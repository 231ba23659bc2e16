// volt_sentencepiece: SentencePiece behind the C interface of sentencepiece_shim.h, built as a
// module of its own (CMakeLists.txt) and opened by the tokenizer with RTLD_DEEPBIND. No volt or
// LibTorch code here: only SentencePiece and the C++ standard library.
#include "volt/demos/llm/sentencepiece_shim.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <exception>
#include <string>
#include <unordered_map>
#include <vector>

struct volt_spm_processor {
  sentencepiece::SentencePieceProcessor sp;
};

namespace {

int fail(volt_spm_sink error, void* ctx, const std::string& message) {
  if (error) error(ctx, message.data(), message.size());
  return 1;
}

/// Sentences for the trainer from the caller's arrays.
class ArrayIterator : public sentencepiece::SentenceIterator {
 public:
  ArrayIterator(const char* const* lines, const size_t* sizes, size_t n) : lines_(lines), sizes_(sizes), n_(n) {
    if (n_ > 0) value_.assign(lines_[0], sizes_[0]);
  }
  bool done() const override { return i_ >= n_; }
  void Next() override {
    if (++i_ < n_) value_.assign(lines_[i_], sizes_[i_]);
  }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const char* const* lines_;
  const size_t* sizes_;
  size_t n_, i_ = 0;
  std::string value_;
};

int load(const char* bytes, size_t n, volt_spm_processor** out, volt_spm_sink error, void* error_ctx) {
  try {
    auto* p = new volt_spm_processor;
    const auto status = p->sp.LoadFromSerializedProto(std::string(bytes, n));
    if (!status.ok()) {
      delete p;
      return fail(error, error_ctx, status.ToString());
    }
    *out = p;
    return 0;
  } catch (const std::exception& e) {
    return fail(error, error_ctx, e.what());
  }
}

void free_processor(volt_spm_processor* p) { delete p; }

int info(const volt_spm_processor* p, int what) {
  switch (what) {
    case 0:
      return p->sp.GetPieceSize();
    case 1:
      return p->sp.unk_id();
    case 2:
      return p->sp.bos_id();
    case 3:
      return p->sp.eos_id();
    case 4:
      return p->sp.pad_id();
    default:
      return -1;
  }
}

int encode(const volt_spm_processor* p, const char* text, size_t n, volt_spm_sink ids, void* ids_ctx,
           volt_spm_sink error, void* error_ctx) {
  try {
    std::vector<int> out;
    const auto status = p->sp.Encode(std::string(text, n), &out);
    if (!status.ok()) return fail(error, error_ctx, status.ToString());
    ids(ids_ctx, out.data(), out.size());
    return 0;
  } catch (const std::exception& e) {
    return fail(error, error_ctx, e.what());
  }
}

int decode(const volt_spm_processor* p, const int* ids, size_t n, volt_spm_sink text, void* text_ctx,
           volt_spm_sink error, void* error_ctx) {
  try {
    std::string out;
    const auto status = p->sp.Decode(std::vector<int>(ids, ids + n), &out);
    if (!status.ok()) return fail(error, error_ctx, status.ToString());
    text(text_ctx, out.data(), out.size());
    return 0;
  } catch (const std::exception& e) {
    return fail(error, error_ctx, e.what());
  }
}

void id_to_piece(const volt_spm_processor* p, int id, volt_spm_sink piece, void* piece_ctx) {
  const std::string& s = p->sp.IdToPiece(id);
  piece(piece_ctx, s.data(), s.size());
}

int train(const char* const* keys, const char* const* values, size_t n_options, const char* const* lines,
          const size_t* line_sizes, size_t n_lines, volt_spm_sink model, void* model_ctx, volt_spm_sink error,
          void* error_ctx) {
  try {
    std::unordered_map<std::string, std::string> options;
    for (size_t i = 0; i < n_options; ++i) options[keys[i]] = values[i];
    ArrayIterator it(lines, line_sizes, n_lines);
    std::string out;
    const auto status = sentencepiece::SentencePieceTrainer::Train(options, &it, &out);
    if (!status.ok()) return fail(error, error_ctx, status.ToString());
    model(model_ctx, out.data(), out.size());
    return 0;
  } catch (const std::exception& e) {
    return fail(error, error_ctx, e.what());
  }
}

const volt_spm_api kApi = {VOLT_SPM_API_VERSION, load, free_processor, info, encode, decode, id_to_piece, train};

}  // namespace

extern "C" __attribute__((visibility("default"))) const volt_spm_api* volt_spm_get_api(void) { return &kApi; }
