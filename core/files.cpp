#include "volt/core/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace volt::detail {

bool path_exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

bool remove_tree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return true;
  if (!S_ISDIR(st.st_mode)) return ::unlink(path.c_str()) == 0;
  std::vector<std::string> children;
  if (DIR* d = ::opendir(path.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") children.push_back(path + "/" + n);
    }
    ::closedir(d);
  }
  bool ok = true;
  for (const auto& c : children) ok = remove_tree(c) && ok;
  return ::rmdir(path.c_str()) == 0 && ok;
}

std::string write_file_atomic(const std::string& path, const std::string& data) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);  // less the umask, as ofstream
  if (fd < 0) return "cannot create '" + tmp + "': " + std::strerror(errno);
  const char* p = data.data();
  size_t left = data.size();
  int err = 0;
  while (left > 0 && err == 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : EIO;
      break;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err == 0) return {};
  ::unlink(tmp.c_str());
  return "writing '" + path + "' failed: " + std::strerror(err) + " (the previous file, if any, is kept)";
}

FileLock::~FileLock() { unlock(); }

FileLock& FileLock::operator=(FileLock&& o) noexcept {
  if (this != &o) {
    unlock();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void FileLock::unlock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
  fd_ = -1;
}

std::string FileLock::try_lock(const std::string& path) {
  unlock();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::string("cannot open '") + path + "': " + std::strerror(errno);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) return "held by another process";
    return std::string("cannot lock '") + path + "': " + std::strerror(err);
  }
  fd_ = fd;
  return {};
}

}  // namespace volt::detail
