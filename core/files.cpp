#include "volt/core/files.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

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

}  // namespace volt::detail
