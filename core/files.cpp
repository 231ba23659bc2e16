#include "volt/core/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
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
