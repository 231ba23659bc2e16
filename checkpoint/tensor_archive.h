#pragma once
/// The file every volt checkpoint is made of (a "full" checkpoint is one; a "sharded" one has one
/// per rank). It is the zip that Python's torch.save writes, so `torch.load(path)` gives a dict of
/// sections ("state_dict", "optimizer_states", "rng_states") of named tensors plus the scalar
/// fields. volt adds one record, `volt/index.yaml`: each tensor's record, dtype, shape and xxh64
/// checksums of every 4 MiB chunk of its bytes, and the checkpoint's metadata. With it volt reads
/// any tensor, or any flat range of one, straight from the file (pread) without unpickling or
/// loading the rest, and verifies every byte it reads.
///
/// ArchiveWriter streams: each tensor is written when add() is called and may be freed right
/// after, so a checkpoint never has to fit in memory; the pickle (small) is written at commit().
/// Thread-safety: one writer or reader per thread; readers are const after construction.
#include <ATen/core/ivalue.h>
#include <torch/types.h>
#include <yaml-cpp/yaml.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace caffe2::serialize {
class PyTorchStreamWriter;
}

namespace volt {

/// Bytes covered by one checksum; a partial read verifies only the chunks it touches.
inline constexpr int64_t kChecksumChunkBytes = int64_t{4} << 20;

/// One tensor as the index describes it.
struct ArchiveTensor {
  std::string key;  // the record: archive/data/<key>
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  std::vector<uint64_t> chunk_sums;
  uint64_t offset = 0;  // byte offset of the data in the file (set by the reader)
  int64_t nbytes() const { return numel * static_cast<int64_t>(c10::elementSize(dtype)); }
};

/// section -> name -> tensor.
using ArchiveIndex = std::map<std::string, std::map<std::string, ArchiveTensor>>;

class ArchiveWriter {
 public:
  /// Opens a temporary sibling of `path`; nothing appears at `path` before commit(). Throws
  /// CheckpointError naming the path if it cannot be created.
  explicit ArchiveWriter(std::string path);
  /// Without commit() (an exception on the way), removes the temporary file.
  ~ArchiveWriter();
  ArchiveWriter(const ArchiveWriter&) = delete;
  ArchiveWriter& operator=(const ArchiveWriter&) = delete;

  /// Writes `t` (any device; copied to the host, contiguous) as `section`/`name` now. Names are
  /// unique within a section. Throws CheckpointError on I/O failure (disk full names the file).
  void add(const std::string& section, const std::string& name, const torch::Tensor& t);
  /// Writes the pickled top-level dict (`fields` first, then the sections) and the index with
  /// `meta`, fsyncs, renames over `path` and fsyncs the directory. The previous file at `path`
  /// stays intact until the rename.
  void commit(const std::vector<std::pair<std::string, c10::IValue>>& fields, const YAML::Node& meta);

  const std::string& path() const { return path_; }
  /// Bytes written to the file so far.
  uint64_t bytes_written() const { return written_; }

  /// Asynchronous saves (async_checkpoint_io.h): from now on add() copies `t` into host memory of
  /// its own (checked as usual, nothing written; the memory of an earlier deferred save's copy of
  /// the same dtype and size when one was kept) and commit() records its arguments. The file is
  /// written by write_deferred(), on any one thread while no other uses this writer.
  void defer_writes();
  /// Writes what add() copied aside (freeing each copy once written), then commits when commit()
  /// was called. Throws CheckpointError naming the file; the previous file at path() stays intact.
  void write_deferred();
  /// Bytes add() copied aside and write_deferred() has not written yet.
  int64_t deferred_bytes() const { return deferred_bytes_; }

 private:
  size_t write_raw(const void* data, size_t n);
  /// Host memory for a deferred copy of `src` (1-D): one a previous save gave back, else new.
  static torch::Tensor take_deferred_buffer(const torch::Tensor& src);
  static void give_back_deferred_buffer(torch::Tensor t);
  struct DeferredTensor {
    std::string section, name;
    torch::Tensor copy;
  };
  bool deferred_ = false;
  std::vector<DeferredTensor> deferred_tensors_;
  std::set<std::pair<std::string, std::string>> deferred_names_;
  std::optional<std::pair<std::vector<std::pair<std::string, c10::IValue>>, YAML::Node>> deferred_commit_;
  int64_t deferred_bytes_ = 0;
  std::string path_, tmp_;
  int fd_ = -1;
  int write_errno_ = 0;
  uint64_t written_ = 0;
  bool committed_ = false;
  bool discard_ = false;
  int64_t next_key_ = 0;
  std::vector<std::string> section_order_;
  std::map<std::string, std::vector<std::string>> order_;
  ArchiveIndex index_;
  std::unique_ptr<caffe2::serialize::PyTorchStreamWriter> zip_;
};

class ArchiveReader {
 public:
  /// Opens and indexes `path`. Throws CheckpointError naming the file if it is missing, empty,
  /// truncated, not a volt checkpoint or of another format version.
  explicit ArchiveReader(std::string path);
  ~ArchiveReader();
  ArchiveReader(const ArchiveReader&) = delete;
  ArchiveReader& operator=(const ArchiveReader&) = delete;

  const std::string& path() const { return path_; }
  /// The metadata given to commit().
  const YAML::Node& meta() const { return meta_; }
  const ArchiveIndex& index() const { return index_; }
  /// nullptr if absent.
  const ArchiveTensor* find(const std::string& section, const std::string& name) const;
  /// The whole tensor, verified. Throws CheckpointError if absent or corrupted.
  torch::Tensor read(const std::string& section, const std::string& name) const;
  /// Elements [start, start + length) of the flattened tensor (1-D), verified chunk by chunk;
  /// reads at most length + 2 chunks of the file.
  torch::Tensor read_flat(const std::string& section, const std::string& name, int64_t start, int64_t length) const;

 private:
  const ArchiveTensor& at(const std::string& section, const std::string& name) const;
  void pread_all(void* dst, uint64_t offset, uint64_t n) const;
  std::string path_;
  int fd_ = -1;
  uint64_t file_size_ = 0;
  YAML::Node meta_;
  ArchiveIndex index_;
};

/// The dtype names used in indexes and manifests ("Float", "BFloat16", ... as c10 prints them).
std::string dtype_name(at::ScalarType t);
/// Throws CheckpointError naming `where` for an unknown name.
at::ScalarType dtype_from_name(const std::string& name, const std::string& where);

namespace detail {
/// XXH64 (Yann Collet's xxHash, 64-bit, from libxxhash) of `n` bytes with `seed`; runs near memory speed.
uint64_t xxh64(const void* data, size_t n, uint64_t seed = 0);
/// `v` as 16 lowercase hex digits: how checksums appear in indexes, manifests and markers.
std::string hex64(uint64_t v);
/// Writes bytes to `path` atomically (temporary file, fsync, rename, fsync of the directory);
/// throws CheckpointError.
void atomic_write(const std::string& path, const char* data, size_t size);
/// fsyncs a directory so a rename inside it is durable.
void fsync_dir(const std::string& dir);
/// Throws CheckpointError naming `path` and the tensor unless [start, start + length) lies within
/// its `numel` elements.
void check_flat_range(const std::string& path, const std::string& section, const std::string& name, int64_t start,
                      int64_t length, int64_t numel);
/// One entry of a zip's central directory: its name, compression method (0: stored) and the size
/// it declares once decompressed (zip64 sizes included).
struct ZipEntry {
  std::string name;
  uint64_t method = 0, uncompressed = 0;
};
/// The entries of the zip at `path` (empty when it does not parse as a zip), without reading any.
std::vector<ZipEntry> zip_entries(const std::string& path);
/// Test seam for asynchronous saves: called by ArchiveWriter::write_deferred before each tensor it
/// writes (on the writing thread) with the file's path, the tensors written so far and their
/// total. A hook that throws fails that write; an empty function removes it. Thread-safe.
/// Frees the host copies deferred writes keep for the next save (tensor_archive.cpp, [Note: reused
/// copies]). AsyncCheckpointIO calls it when it is done. Thread-safe.
void release_deferred_buffers();
void set_deferred_write_hook(std::function<void(const std::string& path, int64_t written, int64_t total)> hook);
}  // namespace detail

}  // namespace volt
