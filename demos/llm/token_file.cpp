#include "volt/demos/llm/token_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "volt/checkpoint/temp_file.h"
#include "volt/checkpoint/tensor_archive.h"
#include "volt/core/errors.h"
#include "volt/demos/llm/tokenizer.h"

namespace volt::demos {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'V', 'O', 'L', 'T', 'T', 'O', 'K', '1'};

void put_le(unsigned char* p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

uint64_t get_le(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::vector<unsigned char> encode_header(const TokenFileHeader& h) {
  std::vector<unsigned char> b(TokenFileHeader::kBytes, 0);
  std::memcpy(b.data(), kMagic, sizeof(kMagic));
  put_le(&b[8], h.token_bytes, 4);
  put_le(&b[12], h.flags, 4);
  put_le(&b[16], static_cast<uint64_t>(h.num_tokens), 8);
  put_le(&b[24], static_cast<uint64_t>(h.vocab_size), 8);
  put_le(&b[32], h.tokenizer, 8);
  put_le(&b[40], static_cast<uint64_t>(h.source_size), 8);
  put_le(&b[48], static_cast<uint64_t>(h.source_mtime_ns), 8);
  return b;
}

/// Writes all of `n` bytes at the file's offset; false with errno set on failure.
bool write_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = EIO;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

/// Reads all of `n` bytes at `offset`; the number of bytes read (short at the end of the file), or
/// -1 with errno set.
ssize_t pread_all(int fd, void* data, size_t n, uint64_t offset) {
  auto* p = static_cast<char*>(data);
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, p + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return static_cast<ssize_t>(done);
}

/// A token file being written: a temporary file beside the target that commit() renames over it and
/// the destructor removes if it was not committed.
class PendingFile {
 public:
  explicit PendingFile(const std::string& path)
      : path_(path), tmp_(detail::claim_temp_sibling(path, std::to_string(counter_++))) {
    const fs::path target(path);
    std::error_code ec;
    if (target.has_parent_path()) fs::create_directories(target.parent_path(), ec);
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    VOLT_CHECK(fd_ >= 0, DataError, "cannot create the token file '", tmp_, "': ", std::strerror(errno),
               ec ? " (creating its folder: " + ec.message() + ")" : std::string());
  }
  ~PendingFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  void write(const void* data, size_t n) {
    VOLT_CHECK(write_all(fd_, data, n), DataError, "writing the token file '", path_,
               "' failed: ", std::strerror(errno), "; nothing was written in its place");
  }
  void pwrite_at(const void* data, size_t n, uint64_t offset) {
    const ssize_t w = ::pwrite(fd_, data, n, static_cast<off_t>(offset));
    VOLT_CHECK(w == static_cast<ssize_t>(n), DataError, "writing the token file '", path_,
               "' failed: ", std::strerror(w < 0 ? errno : EIO), "; nothing was written in its place");
  }
  void commit() {
    const bool synced = ::fsync(fd_) == 0;
    const int close_rc = ::close(fd_);
    fd_ = -1;
    VOLT_CHECK(synced && close_rc == 0, DataError, "flushing the token file '", path_,
               "' failed: ", std::strerror(errno), "; nothing was written in its place");
    VOLT_CHECK(::rename(tmp_.c_str(), path_.c_str()) == 0, DataError, "renaming '", tmp_, "' to '", path_,
               "' failed: ", std::strerror(errno));
    committed_ = true;
    const fs::path target(path_);
    detail::fsync_dir(target.has_parent_path() ? target.parent_path().string() : ".");
  }

 private:
  static inline std::atomic<uint64_t> counter_{0};  // two writers in one process get two names
  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace

SourceStamp SourceStamp::of(const std::string& path) {
  struct stat st {};
  VOLT_CHECK(::stat(path.c_str(), &st) == 0, DataError, "text file '", path, "': ", std::strerror(errno));
  return {static_cast<int64_t>(st.st_size),
          static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + static_cast<int64_t>(st.st_mtim.tv_nsec)};
}

TokenFileHeader write_token_file(const std::string& text_path, const Tokenizer& tokenizer, bool add_bos, bool add_eos,
                                 const std::string& token_path) {
  TokenFileHeader h;
  h.vocab_size = tokenizer.vocab_size();
  h.token_bytes = h.vocab_size <= 65536 ? 2 : 4;
  h.flags = (add_bos ? TokenFileHeader::kBosPerLine : 0u) | (add_eos ? TokenFileHeader::kEosPerLine : 0u);
  h.tokenizer = tokenizer.fingerprint();
  const SourceStamp stamp = SourceStamp::of(text_path);  // before reading: a later edit makes it stale
  h.source_size = stamp.size;
  h.source_mtime_ns = stamp.mtime_ns;

  PendingFile out(token_path);
  const std::vector<unsigned char> placeholder(TokenFileHeader::kBytes, 0);
  out.write(placeholder.data(), placeholder.size());
  std::vector<unsigned char> buf;
  constexpr size_t kFlushBytes = 1 << 20;
  buf.reserve(kFlushBytes + 4096);
  for_each_text_line(text_path, [&](const std::string& line, int64_t) {
    const std::vector<int64_t> ids = tokenizer.encode(line, add_bos, add_eos);
    for (int64_t id : ids) {
      const size_t at = buf.size();
      buf.resize(at + h.token_bytes);
      put_le(&buf[at], static_cast<uint64_t>(id), static_cast<int>(h.token_bytes));
    }
    h.num_tokens += static_cast<int64_t>(ids.size());
    if (buf.size() >= kFlushBytes) {
      out.write(buf.data(), buf.size());
      buf.clear();
    }
  });
  out.write(buf.data(), buf.size());
  VOLT_CHECK(h.num_tokens > 0, DataError, "text file '", text_path, "' holds no text to tokenize");
  const auto header = encode_header(h);
  out.pwrite_at(header.data(), header.size(), 0);
  out.commit();
  return h;
}

TokenFile::TokenFile(const std::string& path) : path_(path) {
  std::error_code ec;
  VOLT_CHECK(!fs::is_directory(path, ec), DataError, "token file '", path, "' is a folder, not a file");
  // O_NONBLOCK: a FIFO in its place must not block the open (it is refused below).
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  VOLT_CHECK(fd_ >= 0, DataError, "token file '", path, "' cannot be opened: ", std::strerror(errno));
  try {
    struct stat st {};
    VOLT_CHECK(::fstat(fd_, &st) == 0, DataError, "token file '", path, "': ", std::strerror(errno));
    VOLT_CHECK(S_ISREG(st.st_mode), DataError, "token file '", path, "' is not a regular file");
    unsigned char b[TokenFileHeader::kBytes];
    const ssize_t got = pread_all(fd_, b, sizeof(b), 0);
    VOLT_CHECK(got >= 0, DataError, "token file '", path, "' cannot be read: ", std::strerror(errno));
    VOLT_CHECK(got >= 8 && std::memcmp(b, kMagic, 7) == 0, DataError, "'", path,
               "' is not a volt token file (no VOLTTOK magic at its start)");
    VOLT_CHECK(b[7] == '1', DataError, "token file '", path, "' has format version '", static_cast<char>(b[7]),
               "'; this volt reads version 1 (a file of data.cache_dir: delete it to have it made again)");
    VOLT_CHECK(got == TokenFileHeader::kBytes, DataError, "token file '", path, "' is truncated: ", got,
               " bytes, shorter than its ", TokenFileHeader::kBytes, "-byte header");
    header_.token_bytes = static_cast<uint32_t>(get_le(&b[8], 4));
    header_.flags = static_cast<uint32_t>(get_le(&b[12], 4));
    const uint64_t num_tokens = get_le(&b[16], 8), vocab_size = get_le(&b[24], 8);
    header_.tokenizer = get_le(&b[32], 8);
    header_.source_size = static_cast<int64_t>(get_le(&b[40], 8));
    header_.source_mtime_ns = static_cast<int64_t>(get_le(&b[48], 8));
    VOLT_CHECK(header_.token_bytes == 2 || header_.token_bytes == 4, DataError, "token file '", path, "': token width ",
               header_.token_bytes, " bytes; only 2 (uint16) and 4 (uint32) exist");
    VOLT_CHECK(vocab_size >= 1 && vocab_size <= (uint64_t{1} << (8 * header_.token_bytes)), DataError, "token file '",
               path, "': vocab_size ", vocab_size, " does not fit its ", header_.token_bytes, "-byte ids");
    VOLT_CHECK(header_.flags <= 3, DataError, "token file '", path, "': unknown flags ", header_.flags);
    header_.vocab_size = static_cast<int64_t>(vocab_size);
    const uint64_t payload = static_cast<uint64_t>(st.st_size) - TokenFileHeader::kBytes;
    VOLT_CHECK(num_tokens <= payload / header_.token_bytes && payload == num_tokens * header_.token_bytes, DataError,
               "token file '", path, "' is ", st.st_size, " bytes but its header declares ", num_tokens, " tokens of ",
               header_.token_bytes, " bytes (", TokenFileHeader::kBytes + num_tokens * header_.token_bytes,
               " bytes): it is truncated or damaged (a file of data.cache_dir: delete it to have it made again)");
    header_.num_tokens = static_cast<int64_t>(num_tokens);
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

TokenFile::~TokenFile() {
  if (fd_ >= 0) ::close(fd_);
}

void TokenFile::read(int64_t start, int64_t count, int64_t* out) const {
  VOLT_CHECK(start >= 0 && count >= 0 && start <= header_.num_tokens - count, DataError, "token file '", path_,
             "': tokens [", start, ", ", start + count, ") are outside its ", header_.num_tokens, " tokens");
  const size_t w = header_.token_bytes;
  std::vector<unsigned char> buf(static_cast<size_t>(count) * w);
  const ssize_t got =
      pread_all(fd_, buf.data(), buf.size(), TokenFileHeader::kBytes + static_cast<uint64_t>(start) * w);
  VOLT_CHECK(got == static_cast<ssize_t>(buf.size()), DataError, "token file '", path_, "': reading tokens [", start,
             ", ", start + count, ") failed: ", got < 0 ? std::strerror(errno) : "the file shrank since it was opened");
  for (int64_t i = 0; i < count; ++i) {
    const auto id = static_cast<int64_t>(get_le(&buf[static_cast<size_t>(i) * w], static_cast<int>(w)));
    VOLT_CHECK(id < header_.vocab_size, DataError, "token file '", path_, "': token ", start + i, " is ", id,
               ", not below the file's vocab_size ", header_.vocab_size,
               ": the file is damaged; delete it (TokenData makes the files in its cache_dir again from the text)");
    out[i] = id;
  }
}

torch::Tensor TokenFile::read(int64_t start, int64_t count) const {
  auto t = torch::empty({count}, torch::kLong);
  read(start, count, t.data_ptr<int64_t>());
  return t;
}

TokenWindows::TokenWindows(std::shared_ptr<const TokenFile> file, int64_t block_size)
    : file_(std::move(file)), block_size_(block_size) {
  VOLT_CHECK(file_ != nullptr, ConfigError, "TokenWindows: no token file");
  VOLT_CHECK(block_size_ >= 1, ConfigError, "TokenWindows: block_size must be >= 1, got ", block_size_);
  VOLT_CHECK(block_size_ < file_->num_tokens(), DataError, "token file '", file_->path(), "' holds ",
             file_->num_tokens(), " tokens, fewer than one window of block_size + 1 = ", block_size_ + 1,
             ": use a smaller data.block_size or more text");
}

int64_t TokenWindows::size() const { return (file_->num_tokens() - 1) / block_size_; }

Batch TokenWindows::get(int64_t index) const {
  VOLT_CHECK(index >= 0 && index < size(), DataError, "token file '", file_->path(), "': window ", index,
             " out of range [0, ", size(), ")");
  const torch::Tensor w = file_->read(index * block_size_, block_size_ + 1);
  Batch b;
  b.set("input_ids", w.slice(0, 0, block_size_));
  b.set("labels", w.slice(0, 1, block_size_ + 1));
  return b;
}

}  // namespace volt::demos
