#pragma once
/// TFRecord files, the container of TensorBoard's event files. Each record is
///   uint64 length (little-endian) | uint32 masked crc32c(length bytes) | data | uint32 masked crc32c(data)
/// Records are buffered in memory and appended to the file on flush(), so the file always ends
/// with whole records (unless the process dies inside that one write call); a failed append is
/// cut back to the last whole record and reported. Not thread-safe.
#include <cstdint>
#include <string>

namespace volt::detail {

class TFRecordWriter {
 public:
  /// Creates `path` exclusively (O_EXCL): an existing file is never overwritten. Throws volt::Error
  /// naming the file when it cannot be created.
  explicit TFRecordWriter(std::string path);
  /// Opens an existing file (or a device such as /dev/full) for appending after its content.
  static TFRecordWriter open_existing(std::string path);
  ~TFRecordWriter();  // flushes what is pending; a failure there is logged, not thrown
  TFRecordWriter(const TFRecordWriter&) = delete;
  TFRecordWriter& operator=(const TFRecordWriter&) = delete;
  TFRecordWriter(TFRecordWriter&& other) noexcept;
  TFRecordWriter& operator=(TFRecordWriter&&) = delete;

  /// Buffers one record (`data` is any bytes: a serialized Event for event files).
  void write(const std::string& data);
  /// Appends the buffered records to the file. Throws volt::Error naming the file and the system's
  /// reason (a full disk, say); the records stay buffered so a later flush can retry.
  void flush();
  const std::string& path() const { return path_; }
  /// Bytes appended to the file so far (whole records only).
  uint64_t bytes_written() const { return written_; }

  /// One record as it is stored: the header, `data` and the footer.
  static std::string frame(const std::string& data);

 private:
  TFRecordWriter(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_ = -1;
  std::string pending_;
  uint64_t base_ = 0;  // the file's size when opened (open_existing)
  uint64_t written_ = 0;
};

}  // namespace volt::detail
