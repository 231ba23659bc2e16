#include "volt/checkpoint/tensor_archive.h"

#include <caffe2/serialize/inline_container.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <utility>

#include "volt/checkpoint/sharded_checkpoint.h"
#include "volt/checkpoint/temp_file.h"
#include "volt/core/errors.h"
#include "volt/core/host_buffers.h"
#include "volt/core/large_buffer.h"
#include "volt/core/yaml_load.h"

namespace volt {

namespace fs = std::filesystem;

namespace {

// 3: volt/sums.yaml checksums the index and the pickle, so every byte a resume reads is verified.
constexpr int64_t kArchiveFormatVersion = 3;
const char* const kIndexRecord = "volt/index.yaml";
const char* const kSumsRecord = "volt/sums.yaml";

/// volt/sums.yaml: the checksums of the records the tensor checksums do not cover.
std::string sums_text(const std::string& index_text, const std::string& pickle) {
  return "index: \"" + detail::hex64(detail::xxh64(index_text.data(), index_text.size())) + "\"\npickle: \"" +
         detail::hex64(detail::xxh64(pickle.data(), pickle.size())) + "\"\n";
}

std::vector<uint64_t> chunk_sums(const void* data, int64_t nbytes) {
  std::vector<uint64_t> out;
  const auto* p = static_cast<const unsigned char*>(data);
  for (int64_t off = 0; off < nbytes; off += kChecksumChunkBytes)
    out.push_back(detail::xxh64(p + off, static_cast<size_t>(std::min(kChecksumChunkBytes, nbytes - off))));
  return out;
}

/// A tensor with the right dtype, shape and storage size but no data: the pickle only needs its
/// metadata (the bytes were already written as records).
at::Tensor placeholder(const ArchiveTensor& t) {
  at::Storage storage(at::Storage::use_byte_size_t(), static_cast<size_t>(t.nbytes()),
                      at::DataPtr(nullptr, at::Device(at::kCPU)), /*allocator=*/nullptr, /*resizable=*/false);
  std::vector<int64_t> strides(t.shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(t.shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * std::max<int64_t>(t.shape[i + 1], 1);
  return at::empty({0}, at::TensorOptions().dtype(t.dtype)).set_(storage, 0, t.shape, strides);
}

/// Little-endian integer of `n` bytes at `p`.
uint64_t le(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string zip_method_name(uint64_t method) {
  switch (method) {
    case 8:
      return "deflate";
    case 9:
      return "deflate64";
    case 12:
      return "bzip2";
    case 14:
      return "lzma";
    case 93:
      return "zstd";
    case 95:
      return "xz";
    default:
      return "unknown";
  }
}

/// The first entry of the zip at `path` that is not stored uncompressed (method 0), with its
/// method. Nothing where the file does not parse as a zip: the reader's own checks report that.
std::optional<std::pair<std::string, uint64_t>> first_compressed_entry(const std::string& path, uint64_t) {
  for (const auto& e : detail::zip_entries(path))
    if (e.method != 0) return std::make_pair(e.name, e.method);
  return std::nullopt;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// dtype names

std::string dtype_name(at::ScalarType t) { return c10::toString(t); }

at::ScalarType dtype_from_name(const std::string& name, const std::string& where) {
  for (at::ScalarType t : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kLong, at::kInt, at::kShort,
                           at::kChar, at::kByte, at::kBool, at::kComplexFloat, at::kComplexDouble})
    if (name == c10::toString(t)) return t;
  throw CheckpointError(detail::str_cat(where, ": unknown dtype '", name, "'"));
}

namespace detail {

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

uint64_t xxh64(const void* data, size_t n, uint64_t seed) {
  return static_cast<uint64_t>(XXH64(data, n, static_cast<XXH64_hash_t>(seed)));
}

void fsync_dir(const std::string& dir) {
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void check_flat_range(const std::string& path, const std::string& section, const std::string& name, int64_t start,
                      int64_t length, int64_t numel) {
  VOLT_CHECK(start >= 0 && length >= 0 && start + length <= numel, CheckpointError, "checkpoint '", path,
             "': elements [", start, ", ", start + length, ") of tensor '", section, "/", name, "' are out of range (",
             numel, " elements)");
}

namespace {
/// Creates the folder `path` goes in; `what` names the file in the error ("checkpoint 'x'").
void create_parent_dirs(const std::string& path, const std::string& what) {
  const fs::path target(path);
  if (!target.has_parent_path()) return;
  std::error_code ec;
  fs::create_directories(target.parent_path(), ec);
  VOLT_CHECK(!ec, CheckpointError, "cannot write ", what, ": cannot create directory '", target.parent_path().string(),
             "': ", ec.message());
}
}  // namespace

void atomic_write(const std::string& path, const char* data, size_t size) {
  const fs::path target(path);
  create_parent_dirs(path, "'" + path + "'");
  const std::string tmp = detail::temp_sibling_name(path, static_cast<long>(::getpid()));  // small: no clean-up
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  VOLT_CHECK(fd >= 0, CheckpointError, "cannot open '", tmp, "' for writing: ", std::strerror(errno));
  size_t done = 0;
  while (done < size) {
    ssize_t w = ::write(fd, data + done, size - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw CheckpointError(str_cat("writing '", path, "' failed after ", done, " of ", size,
                                    " bytes: ", std::strerror(err), "; the previous file is untouched"));
    }
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw CheckpointError(str_cat("flushing '", path, "' failed: ", std::strerror(err)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw CheckpointError(str_cat("renaming '", tmp, "' to '", path, "' failed: ", std::strerror(err)));
  }
  fsync_dir(target.has_parent_path() ? target.parent_path().string() : ".");
}

std::vector<ZipEntry> zip_entries(const std::string& path) {
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  if (ec) return {};
  std::ifstream in(path, std::ios::binary);
  auto read_at = [&](uint64_t off, uint64_t n) {
    std::vector<unsigned char> b(static_cast<size_t>(n));
    in.clear();
    in.seekg(static_cast<std::streamoff>(off));
    in.read(reinterpret_cast<char*>(b.data()), static_cast<std::streamsize>(n));
    if (static_cast<uint64_t>(in.gcount()) != n) b.clear();
    return b;
  };
  // The end-of-central-directory record: 22 bytes plus a comment of up to 64 KiB, at the end.
  const uint64_t tail_n = std::min<uint64_t>(size, 22 + 65535);
  const auto tail = read_at(size - tail_n, tail_n);
  if (tail.size() < 22) return {};
  int64_t eocd = -1;
  for (int64_t i = static_cast<int64_t>(tail.size()) - 22; i >= 0; --i)
    if (le(&tail[i], 4) == 0x06054b50) {
      eocd = i;
      break;
    }
  if (eocd < 0) return {};
  uint64_t entries = le(&tail[eocd + 10], 2), cd_size = le(&tail[eocd + 12], 4), cd_off = le(&tail[eocd + 16], 4);
  if (entries == 0xFFFF || cd_size == 0xFFFFFFFF || cd_off == 0xFFFFFFFF) {
    // zip64: a locator just before the record points at the zip64 end-of-central-directory record.
    if (eocd < 20 || le(&tail[eocd - 20], 4) != 0x07064b50) return {};
    const auto rec = read_at(le(&tail[eocd - 20 + 8], 8), 56);
    if (rec.size() < 56 || le(rec.data(), 4) != 0x06064b50) return {};
    entries = le(&rec[32], 8);
    cd_size = le(&rec[40], 8);
    cd_off = le(&rec[48], 8);
  }
  if (cd_off + cd_size > size || cd_size > (uint64_t{1} << 30)) return {};
  const auto cd = read_at(cd_off, cd_size);
  std::vector<ZipEntry> out;
  uint64_t pos = 0;
  for (uint64_t e = 0; e < entries && pos + 46 <= cd.size(); ++e) {
    const unsigned char* h = &cd[pos];
    if (le(h, 4) != 0x02014b50) return {};
    const uint64_t method = le(h + 10, 2), name_n = le(h + 28, 2), extra_n = le(h + 30, 2);
    const uint64_t next = pos + 46 + name_n + extra_n + le(h + 32, 2);
    if (pos + 46 + name_n + extra_n > cd.size()) return {};
    ZipEntry z;
    z.name.assign(reinterpret_cast<const char*>(h + 46), name_n);
    z.method = method;
    z.uncompressed = le(h + 24, 4);
    if (z.uncompressed == 0xFFFFFFFF) {
      // zip64: the real size is the first field of the extra block 0x0001.
      for (uint64_t x = 0; x + 4 <= extra_n;) {
        const unsigned char* f = h + 46 + name_n + x;
        const uint64_t id = le(f, 2), n = le(f + 2, 2);
        if (id == 1 && n >= 8 && x + 4 + 8 <= extra_n) z.uncompressed = le(f + 4, 8);
        x += 4 + n;
      }
    }
    out.push_back(std::move(z));
    pos = next;
  }
  return out;
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// writer

ArchiveWriter::ArchiveWriter(std::string path) : path_(std::move(path)) {
  detail::create_parent_dirs(path_, "checkpoint '" + path_ + "'");
  tmp_ = detail::claim_temp_sibling(path_);
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  VOLT_CHECK(fd_ >= 0, CheckpointError, "cannot open '", tmp_, "' for writing checkpoint '", path_,
             "': ", std::strerror(errno));
  zip_ = std::make_unique<caffe2::serialize::PyTorchStreamWriter>(
      [this](const void* data, size_t n) -> size_t { return write_raw(data, n); });
}

ArchiveWriter::~ArchiveWriter() {
  if (committed_) return;
  // The zip writer finishes the archive in its destructor and, after a failed write, may throw
  // there: finish it into a discarding sink first, and leak it if even that fails.
  discard_ = true;
  bool finished = zip_->finalized();
  try {
    if (!finished) zip_->writeEndOfFile();
    finished = true;
  } catch (...) {
  }
  if (finished)
    zip_.reset();
  else
    (void)zip_.release();
  if (fd_ >= 0) ::close(fd_);
  ::unlink(tmp_.c_str());
}

size_t ArchiveWriter::write_raw(const void* data, size_t n) {
  if (discard_) return n;
  const char* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < n) {
    ssize_t w = ::write(fd_, p + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      write_errno_ = w < 0 ? errno : ENOSPC;
      return done;  // the zip writer sees a short write and throws; add()/commit() explain
    }
    done += static_cast<size_t>(w);
  }
  written_ += n;
  return n;
}

namespace {
template <class F>
void guarded_write(const std::string& path, const int& write_errno, uint64_t written, F&& f) {
  try {
    f();
  } catch (const c10::Error& e) {
    if (write_errno != 0)
      throw CheckpointError(detail::str_cat("writing checkpoint '", path, "' failed after ", written, " bytes: ",
                                            std::strerror(write_errno), "; the previous checkpoint is untouched"));
    throw CheckpointError(detail::str_cat("writing checkpoint '", path, "' failed: ", e.what_without_backtrace()));
  }
}
}  // namespace

void ArchiveWriter::add(const std::string& section, const std::string& name, const torch::Tensor& t) {
  VOLT_CHECK(!committed_ && !deferred_commit_, CheckpointError, "checkpoint '", path_, "': add() after commit()");
  VOLT_CHECK(t.defined(), CheckpointError, "checkpoint '", path_, "': tensor '", section, "/", name, "' is undefined");
  if (deferred_) {
    VOLT_CHECK(deferred_names_.emplace(section, name).second, CheckpointError, "checkpoint '", path_, "': tensor '",
               section, "/", name, "' written twice");
    // Memory of its own: the training thread goes on changing `t` while the copy is written.
    const torch::Tensor src = t.detach();
    torch::Tensor copy = take_deferred_buffer(src).view(src.sizes());
    copy.copy_(src);
    deferred_bytes_ += static_cast<int64_t>(copy.nbytes());
    deferred_tensors_.push_back({section, name, std::move(copy)});
    return;
  }
  auto& sec = index_[section];
  VOLT_CHECK(!sec.count(name), CheckpointError, "checkpoint '", path_, "': tensor '", section, "/", name,
             "' written twice");
  torch::Tensor c = t.detach().to(torch::kCPU).contiguous();
  ArchiveTensor a;
  a.key = std::to_string(next_key_++);
  a.dtype = c.scalar_type();
  a.shape = c.sizes().vec();
  a.numel = c.numel();
  static const char kEmpty = 0;
  const void* data = a.numel > 0 ? c.data_ptr() : &kEmpty;
  a.chunk_sums = chunk_sums(data, a.nbytes());
  guarded_write(path_, write_errno_, written_,
                [&] { zip_->writeRecord("data/" + a.key, data, static_cast<size_t>(a.nbytes())); });
  sec[name] = std::move(a);
  auto& order = order_[section];
  if (order.empty()) section_order_.push_back(section);
  order.push_back(name);  // the pickled dict keeps the order of add(), e.g. the module's
}

void ArchiveWriter::defer_writes() {
  VOLT_CHECK(index_.empty(), CheckpointError, "checkpoint '", path_, "': defer_writes() after tensors were written");
  deferred_ = true;
}

namespace {
// [Note: reused copies] A fresh multi-GB host buffer costs a page fault per page on first touch:
// on the 2-core VM the copy of the 107 M demo's state took 1.8 s that way, 4x the copy itself. The
// copies of one save are therefore kept, by dtype and size, for the next save of the same state,
// until release_deferred_buffers() (an AsyncCheckpointIO's end).
std::mutex deferred_pool_mutex;
std::multimap<std::pair<int, int64_t>, torch::Tensor> deferred_pool;

std::pair<int, int64_t> pool_key(const torch::Tensor& t) { return {static_cast<int>(t.scalar_type()), t.numel()}; }
}  // namespace

torch::Tensor ArchiveWriter::take_deferred_buffer(const torch::Tensor& src) {
  {
    std::lock_guard<std::mutex> lock(deferred_pool_mutex);
    auto it = deferred_pool.find(pool_key(src));
    if (it != deferred_pool.end()) {
      torch::Tensor t = std::move(it->second);
      deferred_pool.erase(it);
      return t;
    }
  }
  // From a GPU: page-locked, so the copy runs at the link's speed.
  if (src.is_cuda()) return host_buffer(src.numel(), src.scalar_type(), /*pinned=*/true, "checkpoint.async");
  return detail::empty_large(src.numel(), src.options().dtype(src.scalar_type()));
}

void ArchiveWriter::give_back_deferred_buffer(torch::Tensor t) {
  t = t.reshape({-1});
  std::lock_guard<std::mutex> lock(deferred_pool_mutex);
  deferred_pool.emplace(pool_key(t), std::move(t));
}

void detail::release_deferred_buffers() {
  std::lock_guard<std::mutex> lock(deferred_pool_mutex);
  deferred_pool.clear();
}

namespace {
std::mutex deferred_hook_mutex;
std::function<void(const std::string&, int64_t, int64_t)> deferred_hook;
}  // namespace

void detail::set_deferred_write_hook(std::function<void(const std::string&, int64_t, int64_t)> hook) {
  std::lock_guard<std::mutex> lock(deferred_hook_mutex);
  deferred_hook = std::move(hook);
}

void ArchiveWriter::write_deferred() {
  VOLT_CHECK(deferred_, CheckpointError, "checkpoint '", path_, "': write_deferred() without defer_writes()");
  deferred_ = false;
  std::optional<std::pair<std::vector<std::pair<std::string, c10::IValue>>, YAML::Node>> args;
  args.swap(deferred_commit_);
  std::function<void(const std::string&, int64_t, int64_t)> hook;
  {
    std::lock_guard<std::mutex> lock(deferred_hook_mutex);
    hook = deferred_hook;
  }
  const auto total = static_cast<int64_t>(deferred_tensors_.size());
  auto call_hook = [&](int64_t written) {
    if (!hook) return;
    try {
      hook(path_, written, total);
    } catch (const std::exception& e) {
      throw CheckpointError(detail::str_cat("writing checkpoint '", path_, "' failed: ", e.what(),
                                            "; the previous checkpoint is untouched"));
    }
  };
  for (int64_t i = 0; i < total; ++i) {
    call_hook(i);
    DeferredTensor& d = deferred_tensors_[static_cast<size_t>(i)];
    add(d.section, d.name, d.copy);
    deferred_bytes_ -= static_cast<int64_t>(d.copy.nbytes());
    give_back_deferred_buffer(std::move(d.copy));
  }
  call_hook(total);
  deferred_tensors_.clear();
  if (args) commit(args->first, args->second);
}

void ArchiveWriter::commit(const std::vector<std::pair<std::string, c10::IValue>>& fields, const YAML::Node& meta) {
  VOLT_CHECK(!committed_ && !deferred_commit_, CheckpointError, "checkpoint '", path_, "': commit() twice");
  if (deferred_) {
    // A copy of its own: the caller's nodes stay on the training thread.
    deferred_commit_.emplace(fields, YAML::Clone(meta));
    return;
  }
  // The pickle: {fields..., section: {name: tensor}}, tensors pointing at the records by key.
  std::map<const void*, std::string> keys;
  std::vector<at::Tensor> keep;
  c10::impl::GenericDict root(c10::StringType::get(), c10::AnyType::get());
  for (const auto& [k, v] : fields) root.insert(k, v);
  for (const auto& s : section_order_) {
    c10::Dict<std::string, at::Tensor> d;
    for (const auto& name : order_.at(s)) {
      const ArchiveTensor& a = index_.at(s).at(name);
      at::Tensor p = placeholder(a);
      keys[p.storage().unsafeGetStorageImpl()] = a.key;
      keep.push_back(p);
      d.insert(name, p);
    }
    root.insert(s, c10::impl::toGenericDict(d));
  }
  std::string pickle;
  {
    torch::jit::Pickler pickler([&](const char* b, size_t n) { pickle.append(b, n); }, nullptr, nullptr, nullptr,
                                [&](const at::Tensor& t) { return keys.at(t.storage().unsafeGetStorageImpl()); },
                                /*tag_aggregates=*/false);
    pickler.protocol();
    pickler.pushIValue(root);
    pickler.stop();
  }
  YAML::Node index(YAML::NodeType::Map);
  index["format"] = "volt";
  index["format_version"] = kArchiveFormatVersion;
  index["chunk_bytes"] = kChecksumChunkBytes;
  index["meta"] = meta;
  for (const auto& [s, tensors] : index_)
    for (const auto& [name, a] : tensors) {
      YAML::Node n(YAML::NodeType::Map);
      n["key"] = a.key;
      n["dtype"] = dtype_name(a.dtype);
      n["shape"] = YAML::Node(YAML::NodeType::Sequence);
      for (auto d : a.shape) n["shape"].push_back(d);
      n["sums"] = YAML::Node(YAML::NodeType::Sequence);
      for (auto h : a.chunk_sums) n["sums"].push_back(detail::hex64(h));
      n["shape"].SetStyle(YAML::EmitterStyle::Flow);
      n["sums"].SetStyle(YAML::EmitterStyle::Flow);
      index["tensors"][s][name] = n;
    }
  const std::string index_text = YAML::Dump(index);
  const std::string sums = sums_text(index_text, pickle);
  guarded_write(path_, write_errno_, written_, [&] {
    zip_->writeRecord("data.pkl", pickle.data(), pickle.size());
    zip_->writeRecord(kIndexRecord, index_text.data(), index_text.size());
    zip_->writeRecord(kSumsRecord, sums.data(), sums.size());
    zip_->writeEndOfFile();
  });
  if (::fsync(fd_) != 0 || ::close(fd_) != 0) {
    fd_ = -1;
    throw CheckpointError(detail::str_cat("flushing checkpoint '", path_, "' failed: ", std::strerror(errno),
                                          "; the previous checkpoint is untouched"));
  }
  fd_ = -1;
  std::error_code ec;
  if (fs::is_regular_file(fs::path(path_) / kManifestFile, ec)) {
    // A sharded checkpoint of the same name (a run that changed state_dict_type): exchanged for
    // this file in one step, then removed, as a sharded save replaces a full file. Any other
    // folder at the path is left alone: the rename below fails and says so.
    detail::swap_into_place(tmp_, path_);
  } else if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    throw CheckpointError(detail::str_cat("renaming '", tmp_, "' to '", path_, "' failed: ", std::strerror(errno)));
  }
  committed_ = true;
  const fs::path target(path_);
  detail::fsync_dir(target.has_parent_path() ? target.parent_path().string() : ".");
}

// ---------------------------------------------------------------------------------------------
// reader

namespace {
/// A file descriptor closed on scope exit unless released.
struct OwnedFd {
  int fd = -1;
  ~OwnedFd() {
    if (fd >= 0) ::close(fd);
  }
  int release() { return std::exchange(fd, -1); }
};
}  // namespace

ArchiveReader::ArchiveReader(std::string path) : path_(std::move(path)) {
  std::error_code ec;
  const auto type = fs::status(path_, ec).type();
  VOLT_CHECK(type != fs::file_type::not_found, CheckpointError, "checkpoint '", path_, "' does not exist");
  VOLT_CHECK(!ec, CheckpointError, "checkpoint '", path_, "': ", ec.message());
  VOLT_CHECK(type == fs::file_type::regular, CheckpointError, "checkpoint '", path_, "' is not a file");
  // One open file for everything read below. A save renames its new file over this path (a run
  // writing last.ckpt while an evaluation reads it): reading the index of one file and the tensors
  // of the next would look like a corrupted checkpoint. Readers that take a path (the zip reader)
  // get the open file's /proc/self/fd link, which names this file even after the rename.
  OwnedFd file{::open(path_.c_str(), O_RDONLY | O_CLOEXEC)};
  VOLT_CHECK(file.fd >= 0, CheckpointError, "cannot open checkpoint '", path_, "': ", std::strerror(errno));
  struct stat st {};
  VOLT_CHECK(::fstat(file.fd, &st) == 0 && S_ISREG(st.st_mode), CheckpointError, "checkpoint '", path_,
             "' is not a file");
  file_size_ = static_cast<uint64_t>(st.st_size);
  VOLT_CHECK(file_size_ > 0, CheckpointError, "checkpoint '", path_, "' is empty (truncated write?)");
  const std::string proc_link = "/proc/self/fd/" + std::to_string(file.fd);
  const std::string& same_file = ::access(proc_link.c_str(), R_OK) == 0 ? proc_link : path_;
  {
    // A safetensors file: an 8-byte header length, then its JSON header. Weights only, no run.
    char head[9] = {0};
    std::ifstream in(same_file, std::ios::binary);
    in.read(head, 9);
    VOLT_CHECK(!(in.gcount() == 9 && head[8] == '{'), CheckpointError, "'", path_,
               "' is a safetensors file: weights only, without the optimizer, loop and RNG state a checkpoint "
               "resumes from. Load its weights into the model with volt::load_weights(module, \"",
               path_, "\") (docs/checkpoints.md, \"Weights from elsewhere\") and train or evaluate without ckpt_path");
  }
  // Tensors are read straight from the file at their offsets, so every entry must be stored
  // uncompressed, as volt and torch.save write them; a re-zipped file would otherwise look truncated.
  if (auto c = first_compressed_entry(same_file, file_size_))
    throw CheckpointError(detail::str_cat(
        "checkpoint '", path_, "': zip entry '", c->first, "' is compressed (method ", c->second, ", ",
        zip_method_name(c->second),
        "); volt reads only stored (uncompressed) entries, as volt and torch.save "
        "write them. The file was probably re-zipped: store it again without compression (`zip -0 -r`, or "
        "Python's zipfile with ZIP_STORED), or save the checkpoint again"));
  std::string index_text;
  std::map<std::string, uint64_t> offsets;
  try {
    caffe2::serialize::PyTorchStreamReader zip(same_file);
    VOLT_CHECK(zip.hasRecord(kIndexRecord), CheckpointError, "checkpoint '", path_,
               "' has no volt index: not a volt checkpoint (a plain torch.save file, or volt before format 2)");
    auto [data, size] = zip.getRecord(kIndexRecord);
    index_text.assign(static_cast<const char*>(data.get()), size);
    YAML::Node index =
        detail::load_checkpoint_yaml(index_text, detail::str_cat("checkpoint '", path_, "': its volt index"));
    VOLT_CHECK(index["format"] && index["format"].as<std::string>() == "volt", CheckpointError, "checkpoint '", path_,
               "' is not a volt checkpoint");
    const int64_t fv = index["format_version"].as<int64_t>();
    VOLT_CHECK(fv == kArchiveFormatVersion, CheckpointError, "checkpoint '", path_, "' has format version ", fv,
               "; this volt reads version ", kArchiveFormatVersion);
    VOLT_CHECK(index["chunk_bytes"].as<int64_t>() == kChecksumChunkBytes, CheckpointError, "checkpoint '", path_,
               "': unexpected checksum chunk size");
    // The index and the pickle (epoch, step, metadata, the tensors' layout) are verified as the
    // tensors are: an edited or damaged byte there would silently change the resume.
    VOLT_CHECK(zip.hasRecord(kSumsRecord) && zip.hasRecord("data.pkl"), CheckpointError, "checkpoint '", path_,
               "' lacks the checksums of its index (damaged)");
    auto [pdata, psize] = zip.getRecord("data.pkl");
    auto [sdata, ssize] = zip.getRecord(kSumsRecord);
    const std::string pickle(static_cast<const char*>(pdata.get()), psize);
    const std::string sums(static_cast<const char*>(sdata.get()), ssize);
    VOLT_CHECK(sums == sums_text(index_text, pickle), CheckpointError, "checkpoint '", path_,
               "': its index or data.pkl does not match its checksum (corrupted or edited)");
    meta_ = index["meta"] ? index["meta"] : YAML::Node(YAML::NodeType::Map);
    if (index["tensors"])
      for (const auto& sec : index["tensors"]) {
        auto& dst = index_[sec.first.as<std::string>()];
        for (const auto& kv : sec.second) {
          const std::string name = kv.first.as<std::string>();
          const YAML::Node& n = kv.second;
          ArchiveTensor a;
          a.key = n["key"].as<std::string>();
          a.dtype = dtype_from_name(n["dtype"].as<std::string>(), "checkpoint '" + path_ + "'");
          a.shape = n["shape"].as<std::vector<int64_t>>();
          a.numel = 1;
          for (auto d : a.shape) a.numel *= d;
          for (const auto& h : n["sums"]) a.chunk_sums.push_back(std::stoull(h.as<std::string>(), nullptr, 16));
          const int64_t chunks = (a.nbytes() + kChecksumChunkBytes - 1) / kChecksumChunkBytes;
          VOLT_CHECK(static_cast<int64_t>(a.chunk_sums.size()) == chunks, CheckpointError, "checkpoint '", path_,
                     "': the index of tensor '", name, "' is inconsistent");
          a.offset = zip.getRecordOffset("data/" + a.key);
          dst[name] = std::move(a);
        }
      }
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (auto* ce = dynamic_cast<const c10::Error*>(&e)) what = ce->what_without_backtrace();
    throw CheckpointError(detail::str_cat("checkpoint '", path_,
                                          "' is truncated, corrupted or not a volt checkpoint: ", what.substr(0, 300)));
  }
  for (const auto& [s, tensors] : index_)
    for (const auto& [name, a] : tensors)
      VOLT_CHECK(a.offset + static_cast<uint64_t>(a.nbytes()) <= file_size_, CheckpointError, "checkpoint '", path_,
                 "' is truncated: tensor '", s, "/", name, "' ends past the end of the file");
  fd_ = file.release();
}

ArchiveReader::~ArchiveReader() {
  if (fd_ >= 0) ::close(fd_);
}

const ArchiveTensor* ArchiveReader::find(const std::string& section, const std::string& name) const {
  auto s = index_.find(section);
  if (s == index_.end()) return nullptr;
  auto t = s->second.find(name);
  return t == s->second.end() ? nullptr : &t->second;
}

const ArchiveTensor& ArchiveReader::at(const std::string& section, const std::string& name) const {
  const ArchiveTensor* a = find(section, name);
  VOLT_CHECK(a != nullptr, CheckpointError, "checkpoint '", path_, "' has no tensor '", section, "/", name, "'");
  return *a;
}

void ArchiveReader::pread_all(void* dst, uint64_t offset, uint64_t n) const {
  auto* p = static_cast<char*>(dst);
  uint64_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd_, p + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    VOLT_CHECK(r > 0, CheckpointError, "reading checkpoint '", path_, "' failed at byte ", offset + done, ": ",
               r == 0 ? "unexpected end of file (truncated?)" : std::strerror(errno));
    done += static_cast<uint64_t>(r);
  }
}

torch::Tensor ArchiveReader::read(const std::string& section, const std::string& name) const {
  const ArchiveTensor& a = at(section, name);
  torch::Tensor out = torch::empty(a.shape, torch::TensorOptions().dtype(a.dtype));
  if (a.numel == 0) return out;
  pread_all(out.data_ptr(), a.offset, static_cast<uint64_t>(a.nbytes()));
  const auto sums = chunk_sums(out.data_ptr(), a.nbytes());
  for (size_t c = 0; c < sums.size(); ++c)
    VOLT_CHECK(sums[c] == a.chunk_sums[c], CheckpointError, "checkpoint '", path_,
               "' is corrupted: checksum mismatch in tensor '", section, "/", name, "' (bytes ",
               c * kChecksumChunkBytes, " onwards)");
  return out;
}

torch::Tensor ArchiveReader::read_flat(const std::string& section, const std::string& name, int64_t start,
                                       int64_t length) const {
  const ArchiveTensor& a = at(section, name);
  detail::check_flat_range(path_, section, name, start, length, a.numel);
  if (start == 0 && length == a.numel) return read(section, name).reshape({-1});
  torch::Tensor out = torch::empty({length}, torch::TensorOptions().dtype(a.dtype));
  if (length == 0) return out;
  const int64_t es = static_cast<int64_t>(c10::elementSize(a.dtype));
  const int64_t b0 = start * es, b1 = (start + length) * es;
  const int64_t c0 = b0 / kChecksumChunkBytes, c1 = (b1 + kChecksumChunkBytes - 1) / kChecksumChunkBytes;
  const int64_t span0 = c0 * kChecksumChunkBytes, span1 = std::min(c1 * kChecksumChunkBytes, a.nbytes());
  std::vector<unsigned char> buf(static_cast<size_t>(span1 - span0));
  pread_all(buf.data(), a.offset + static_cast<uint64_t>(span0), buf.size());
  for (int64_t c = c0; c < c1; ++c) {
    const int64_t o = c * kChecksumChunkBytes - span0;
    const int64_t n = std::min(kChecksumChunkBytes, a.nbytes() - c * kChecksumChunkBytes);
    VOLT_CHECK(detail::xxh64(buf.data() + o, static_cast<size_t>(n)) == a.chunk_sums[static_cast<size_t>(c)],
               CheckpointError, "checkpoint '", path_, "' is corrupted: checksum mismatch in tensor '", section, "/",
               name, "' (bytes ", c * kChecksumChunkBytes, " onwards)");
  }
  std::memcpy(out.data_ptr(), buf.data() + (b0 - span0), static_cast<size_t>(b1 - b0));
  return out;
}

}  // namespace volt
