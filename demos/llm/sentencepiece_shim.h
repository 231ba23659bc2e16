#pragma once
/// The C interface of volt_sentencepiece, the module that holds SentencePiece for the tokenizer
/// (demos/llm/tokenizer.cpp opens it; nothing else includes this header).
///
/// Why a module: Debian's libsentencepiece carries its own copy of protobuf-lite (3.14) under the
/// same symbol names as the libprotobuf (3.21) that Debian's LibTorch loads. Linked into one
/// process they abort at start-up (protobuf's version check) or corrupt each other's descriptor
/// tables. The tokenizer therefore opens this module with dlopen(RTLD_LOCAL | RTLD_DEEPBIND): the
/// module and its libsentencepiece resolve their symbols among themselves first, the process keeps
/// its own, and neither sees the other's protobuf.
///
/// Only C types cross the boundary, and memory never changes hands: variable-length results are
/// handed to a sink callback that copies them (so a malloc preloaded into the process, which
/// RTLD_DEEPBIND would bypass inside the module, never frees the module's memory or vice versa).
/// Every function that can fail returns 0 on success, else non-zero after passing the message to
/// `error` (when given).
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Receives `n` bytes (or `n` ints for encode) that are valid only during the call.
typedef void (*volt_spm_sink)(void* ctx, const void* data, size_t n);

typedef struct volt_spm_processor volt_spm_processor;

typedef struct volt_spm_api {
  /// VOLT_SPM_API_VERSION of the module; the tokenizer refuses another.
  int version;
  /// Loads a serialized ModelProto (a .model file's bytes).
  int (*load)(const char* bytes, size_t n, volt_spm_processor** out, volt_spm_sink error, void* error_ctx);
  void (*free)(volt_spm_processor* p);
  /// Piece count and special ids (-1 when absent): what = 0 pieces, 1 unk, 2 bos, 3 eos, 4 pad.
  int (*info)(const volt_spm_processor* p, int what);
  /// The ids of `text` (UTF-8), as ints, to `ids`.
  int (*encode)(const volt_spm_processor* p, const char* text, size_t n, volt_spm_sink ids, void* ids_ctx,
                volt_spm_sink error, void* error_ctx);
  /// The text of `ids` (all within [0, pieces)), to `text`.
  int (*decode)(const volt_spm_processor* p, const int* ids, size_t n, volt_spm_sink text, void* text_ctx,
                volt_spm_sink error, void* error_ctx);
  /// The piece of `id` (within [0, pieces)), to `piece`.
  void (*id_to_piece)(const volt_spm_processor* p, int id, volt_spm_sink piece, void* piece_ctx);
  /// SentencePieceTrainer::Train with `n_options` key/value flags, on `n_lines` sentences; the
  /// serialized model to `model`.
  int (*train)(const char* const* keys, const char* const* values, size_t n_options, const char* const* lines,
               const size_t* line_sizes, size_t n_lines, volt_spm_sink model, void* model_ctx, volt_spm_sink error,
               void* error_ctx);
} volt_spm_api;

#define VOLT_SPM_API_VERSION 1

/// The module's one exported symbol.
const volt_spm_api* volt_spm_get_api(void);

#ifdef __cplusplus
}
#endif
