#include "volt/loggers/tfrecord_writer.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "volt/core/errors.h"
#include "volt/loggers/crc32c.h"

namespace volt::detail {

namespace {
void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFFu));
}
}  // namespace

std::string TFRecordWriter::frame(const std::string& data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(out, data.size(), 8);
  put_le(out, mask_crc32c(crc32c(out.data(), 8)), 4);
  out += data;
  put_le(out, mask_crc32c(crc32c(data.data(), data.size())), 4);
  return out;
}

TFRecordWriter::TFRecordWriter(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  VOLT_CHECK(fd_ >= 0, Error, "cannot create the event file '", path_, "': ", std::strerror(errno));
}

TFRecordWriter TFRecordWriter::open_existing(std::string path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  VOLT_CHECK(fd >= 0, Error, "cannot open '", path, "' for writing: ", std::strerror(errno));
  TFRecordWriter w(std::move(path), fd);
  const off_t end = ::lseek(fd, 0, SEEK_END);
  w.base_ = end > 0 ? static_cast<uint64_t>(end) : 0;
  return w;
}

TFRecordWriter::TFRecordWriter(TFRecordWriter&& o) noexcept
    : path_(std::move(o.path_)), fd_(o.fd_), pending_(std::move(o.pending_)), base_(o.base_), written_(o.written_) {
  o.fd_ = -1;
}

TFRecordWriter::~TFRecordWriter() {
  if (fd_ < 0) return;
  try {
    flush();
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
  }
  ::close(fd_);
}

void TFRecordWriter::write(const std::string& data) { pending_ += frame(data); }

void TFRecordWriter::flush() {
  size_t done = 0;
  while (done < pending_.size()) {
    const ssize_t n = ::write(fd_, pending_.data() + done, pending_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      // Cut a partial append back so the file ends with a whole record (a no-op on devices).
      if (done > 0 && ::ftruncate(fd_, static_cast<off_t>(base_ + written_)) == 0)
        (void)::lseek(fd_, static_cast<off_t>(base_ + written_), SEEK_SET);
      throw Error(str_cat("writing the event file '", path_, "' failed: ", std::strerror(err),
                          "; the records written before are kept, ", pending_.size(), " bytes are still pending"));
    }
    done += static_cast<size_t>(n);
  }
  written_ += pending_.size();
  pending_.clear();
}

}  // namespace volt::detail
