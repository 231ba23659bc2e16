#pragma once
/// Reading and writing safetensors files, Hugging Face's format for weights:
///
///   8 bytes   N, the header length (little-endian u64)
///   N bytes   JSON: {"__metadata__": {str: str}, "<name>": {"dtype": "F32", "shape": [..],
///             "data_offsets": [begin, end]}, ...}, padded with spaces to a multiple of 8
///   the rest  every tensor's bytes, little-endian, row-major; offsets count from here
///
/// dtypes: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL (the format's U16/U32/U64/F8 have no LibTorch
/// 1.13 type and are refused, naming the tensor).
///
/// The reader checks the whole header before any tensor is read (length, JSON, dtypes, shapes,
/// offsets that cover the data exactly once), so a damaged file is a CheckpointError naming the file
/// and the problem, never a crash or a wrong tensor. The writer lays the data out as the reference
/// implementation does (largest item size first, then by name, so every tensor is aligned to its
/// item size), writes the header keys sorted, and commits atomically (temporary file, fsync,
/// rename, fsync of the folder).
#include <torch/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace volt {

/// One tensor as a safetensors header describes it.
struct SafetensorsEntry {
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  uint64_t begin = 0, end = 0;  // byte offsets from the start of the data
};

/// The format's name of a dtype ("F32", "BF16", ...); throws CheckpointError for a dtype the
/// format cannot hold (complex, quantized), naming `what` (the tensor).
std::string safetensors_dtype_name(at::ScalarType t, const std::string& what);

/// Reads one safetensors file. Ownership: holds the file open. Thread-safety: const methods may run
/// concurrently (pread).
class SafetensorsReader {
 public:
  /// Opens `path` and validates its header. Throws CheckpointError naming the file and the
  /// problem: missing, truncated, a header length past the end, malformed JSON, an unknown dtype,
  /// offsets out of range, overlapping, of the wrong size for the shape, or leaving gaps.
  explicit SafetensorsReader(std::string path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& path() const { return path_; }
  /// The header's "__metadata__" (empty if absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  /// Tensor names, sorted.
  std::vector<std::string> names() const;
  bool has(const std::string& name) const { return entries_.count(name) > 0; }
  /// Throws CheckpointError if absent.
  const SafetensorsEntry& entry(const std::string& name) const;
  /// The tensor, on the CPU, in its stored dtype and shape. Throws CheckpointError if absent or if
  /// the file cannot be read (a BOOL tensor holding bytes other than 0 and 1 too).
  torch::Tensor read(const std::string& name) const;
  /// Every tensor, by name.
  std::map<std::string, torch::Tensor> read_all() const;
  /// Bytes of the header (8 + N); the data starts there.
  uint64_t data_start() const { return data_start_; }

 private:
  void parse_header(const std::string& text);
  std::string path_;
  int fd_ = -1;
  uint64_t file_size_ = 0, data_start_ = 0;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, SafetensorsEntry> entries_;
};

/// Writes one safetensors file, streaming: every tensor's dtype and shape are declared up front
/// (the header comes first in the file), then each tensor is written by add(), in any order, and
/// may be freed right after. Nothing appears at `path` before commit(). Thread-safety: none.
class SafetensorsWriter {
 public:
  struct Spec {
    at::ScalarType dtype = at::kFloat;
    std::vector<int64_t> shape;
  };
  /// Opens a temporary sibling of `path` (checkpoint/temp_file.h; it removes what killed writers of `path` left) and
  /// writes the header. Throws CheckpointError naming the file or the tensor (a dtype the format cannot hold, a name
  /// that is not UTF-8, a folder that cannot be created).
  SafetensorsWriter(std::string path, const std::map<std::string, Spec>& tensors,
                    const std::map<std::string, std::string>& metadata = {});
  /// Without commit() (an exception on the way), removes the temporary file.
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  /// Writes `t` (any device and layout; copied to the host, contiguous) as `name`, which must be
  /// declared, not yet written, and have the declared dtype and shape.
  void add(const std::string& name, const torch::Tensor& t);
  /// Checks every declared tensor was written, fsyncs, renames over `path`, fsyncs the folder.
  /// Returns the file's size. The previous file at `path` stays intact until the rename.
  uint64_t commit();

  const std::string& path() const { return path_; }

 private:
  void pwrite_all(const void* data, uint64_t n, uint64_t offset, const std::string& what);
  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
  uint64_t data_start_ = 0, total_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, bool> written_;
};

/// Writes `tensors` as a safetensors file at `path`, atomically (see SafetensorsWriter).
/// Returns the file's size.
uint64_t save_safetensors(const std::map<std::string, torch::Tensor>& tensors, const std::string& path,
                          const std::map<std::string, std::string>& metadata = {});
/// Every tensor of the safetensors file at `path` (see SafetensorsReader).
std::map<std::string, torch::Tensor> load_safetensors(const std::string& path);

}  // namespace volt
