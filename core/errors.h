#pragma once
/// Typed errors thrown by volt. Each message says what went wrong, where (config key, file, rank) and
/// what to do about it. All derive from volt::Error (a std::runtime_error), so `catch (const
/// volt::Error&)` catches every volt failure; the CLI maps them to a non-zero exit.
#include <sstream>
#include <stdexcept>
#include <string>

namespace volt {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
/// Bad configuration: an unknown key, a wrong type, an out-of-range value, a combination that
/// cannot work. Thrown before any work starts.
class ConfigError : public Error {
 public:
  using Error::Error;
};
/// A collective failed, timed out, or a peer rank died.
class DistributedError : public Error {
 public:
  using Error::Error;
};
/// A checkpoint could not be written, or is missing, truncated, corrupted or from another model.
class CheckpointError : public Error {
 public:
  using Error::Error;
};
/// Training cannot go on: the loss or the weights turned nan or inf (training diverged).
class TrainingError : public Error {
 public:
  using Error::Error;
};
/// A data file is missing or malformed.
class DataError : public Error {
 public:
  using Error::Error;
};

namespace detail {
inline void append_all(std::ostringstream&) {}
template <class T, class... Rest>
void append_all(std::ostringstream& os, const T& v, const Rest&... rest) {
  os << v;
  append_all(os, rest...);
}
template <class... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  append_all(os, args...);
  return os.str();
}
}  // namespace detail
}  // namespace volt

/// VOLT_CHECK(cond, ErrorType, message parts...): throws ErrorType with the concatenated message.
#define VOLT_CHECK(cond, ErrorType, ...)                                \
  do {                                                                  \
    if (!(cond)) throw ErrorType(::volt::detail::str_cat(__VA_ARGS__)); \
  } while (0)
