#include "volt/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "volt/checkpoint/temp_file.h"
#include "volt/checkpoint/tensor_archive.h"
#include "volt/core/errors.h"

namespace volt {

namespace fs = std::filesystem;
using nlohmann::json;

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian, as this host must be");

namespace {

// As the reference implementation: a larger header is refused rather than allocated.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DtypeName {
  const char* name;
  at::ScalarType type;
};
constexpr DtypeName kDtypes[] = {
    {"F64", at::kDouble}, {"F32", at::kFloat}, {"F16", at::kHalf}, {"BF16", at::kBFloat16}, {"I64", at::kLong},
    {"I32", at::kInt},    {"I16", at::kShort}, {"I8", at::kChar},  {"U8", at::kByte},       {"BOOL", at::kBool}};
// In the format, without a LibTorch 1.13 type.
const std::set<std::string> kUnsupported = {"U16", "U32", "U64", "F8_E4M3", "F8_E5M2"};

std::string known_dtypes() {
  std::string s;
  for (const auto& d : kDtypes) s += (s.empty() ? "" : " ") + std::string(d.name);
  return s;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

/// Creates the folder `path` goes in.
void create_parent_dirs(const std::string& path) {
  const fs::path target(path);
  if (!target.has_parent_path()) return;
  std::error_code ec;
  fs::create_directories(target.parent_path(), ec);
  VOLT_CHECK(!ec, CheckpointError, "cannot write safetensors file '", path, "': cannot create directory '",
             target.parent_path().string(), "': ", ec.message());
}

}  // namespace

std::string safetensors_dtype_name(at::ScalarType t, const std::string& what) {
  for (const auto& d : kDtypes)
    if (d.type == t) return d.name;
  throw CheckpointError(detail::str_cat(what, ": dtype ", c10::toString(t),
                                        " cannot be stored in a safetensors file (it holds ", known_dtypes(), ")"));
}

// ---------------------------------------------------------------------------------------------
// reader

SafetensorsReader::SafetensorsReader(std::string path) : path_(std::move(path)) {
  const std::string where = "safetensors file '" + path_ + "'";
  fd_ = ::open(path_.c_str(), O_RDONLY);
  VOLT_CHECK(fd_ >= 0, CheckpointError, "cannot open ", where, ": ", std::strerror(errno));
  struct stat st {};
  try {
    VOLT_CHECK(::fstat(fd_, &st) == 0, CheckpointError, "cannot stat ", where, ": ", std::strerror(errno));
    VOLT_CHECK(S_ISREG(st.st_mode), CheckpointError, where, " is not a file");
    file_size_ = static_cast<uint64_t>(st.st_size);
    VOLT_CHECK(file_size_ >= 8, CheckpointError, where, " is truncated: ", file_size_,
               " bytes, fewer than the 8 of the header length");
    unsigned char len[8];
    VOLT_CHECK(::pread(fd_, len, 8, 0) == 8, CheckpointError, "reading ", where, " failed: ", std::strerror(errno));
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
    VOLT_CHECK(n <= file_size_ - 8, CheckpointError, where, ": header length ", n, " is larger than the file (",
               file_size_, " bytes): the file is truncated or not a safetensors file");
    VOLT_CHECK(n <= kMaxHeaderBytes, CheckpointError, where, ": header length ", n, " exceeds the limit of ",
               kMaxHeaderBytes, " bytes");
    data_start_ = 8 + n;
    std::string text(static_cast<size_t>(n), '\0');
    if (n > 0)
      VOLT_CHECK(::pread(fd_, text.data(), n, 8) == static_cast<ssize_t>(n), CheckpointError, "reading ", where,
                 " failed: ", std::strerror(errno));
    parse_header(text);
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) ::close(fd_);
}

void SafetensorsReader::parse_header(const std::string& text) {
  const std::string where = "safetensors file '" + path_ + "'";
  VOLT_CHECK(!text.empty() && text[0] == '{', CheckpointError, where,
             ": the header does not start with '{': not a safetensors file");
  // Duplicate names would silently keep one of the tensors: refused.
  std::string duplicate;
  std::set<std::string> top_keys;
  json header;
  try {
    header = json::parse(text, [&](int depth, json::parse_event_t event, json& parsed) {
      if (event == json::parse_event_t::key && depth == 1 && !top_keys.insert(parsed.get<std::string>()).second &&
          duplicate.empty())
        duplicate = parsed.get<std::string>();
      return true;
    });
  } catch (const json::exception& e) {
    throw CheckpointError(detail::str_cat(where, ": the header is not valid JSON (", e.what(), ")"));
  }
  VOLT_CHECK(header.is_object(), CheckpointError, where, ": the header is not a JSON object");
  VOLT_CHECK(duplicate.empty(), CheckpointError, where, ": the header names '", duplicate, "' twice");
  const uint64_t data_size = file_size_ - data_start_;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      if (v.is_null()) continue;
      VOLT_CHECK(v.is_object(), CheckpointError, where, ": __metadata__ is not an object of strings");
      for (const auto& [k, s] : v.items()) {
        VOLT_CHECK(s.is_string(), CheckpointError, where, ": __metadata__ entry '", k, "' is ", s.type_name(),
                   ", not a string");
        metadata_[k] = s.get<std::string>();
      }
      continue;
    }
    const std::string tw = where + ": tensor '" + name + "'";
    VOLT_CHECK(v.is_object(), CheckpointError, tw, " is ", v.type_name(), ", not an object");
    VOLT_CHECK(v.contains("dtype") && v["dtype"].is_string(), CheckpointError, tw, " has no dtype string");
    VOLT_CHECK(v.contains("shape") && v["shape"].is_array(), CheckpointError, tw, " has no shape list");
    VOLT_CHECK(v.contains("data_offsets") && v["data_offsets"].is_array() && v["data_offsets"].size() == 2,
               CheckpointError, tw, " has no data_offsets [begin, end]");
    SafetensorsEntry e;
    const std::string dt = v["dtype"].get<std::string>();
    bool found = false;
    for (const auto& d : kDtypes)
      if (dt == d.name) {
        e.dtype = d.type;
        found = true;
      }
    VOLT_CHECK(!kUnsupported.count(dt), CheckpointError, tw, " has dtype ", dt,
               ", which LibTorch 1.13 has no type for; convert it to one of ", known_dtypes());
    VOLT_CHECK(found, CheckpointError, tw, " has unknown dtype '", dt, "' (known: ", known_dtypes(), ")");
    uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
      VOLT_CHECK(d.is_number_unsigned(), CheckpointError, tw, " has a shape entry ", d.dump(),
                 " that is not a non-negative integer");
      const uint64_t x = d.get<uint64_t>();
      VOLT_CHECK(x <= (uint64_t{1} << 62) && !__builtin_mul_overflow(numel, x, &numel) && numel <= (uint64_t{1} << 62),
                 CheckpointError, tw, " has a shape ", v["shape"].dump(), " too large to exist");
      e.shape.push_back(static_cast<int64_t>(x));
    }
    e.numel = static_cast<int64_t>(numel);
    for (const auto& o : v["data_offsets"])
      VOLT_CHECK(o.is_number_unsigned(), CheckpointError, tw, " has data_offsets ", v["data_offsets"].dump(),
                 " that are not non-negative integers");
    e.begin = v["data_offsets"][0].get<uint64_t>();
    e.end = v["data_offsets"][1].get<uint64_t>();
    VOLT_CHECK(e.begin <= e.end, CheckpointError, tw, " has data_offsets [", e.begin, ", ", e.end,
               "] that end before they begin");
    VOLT_CHECK(e.end <= data_size, CheckpointError, tw, " has data_offsets [", e.begin, ", ", e.end,
               "] out of range: the file holds ", data_size, " bytes of data (truncated, or wrong offsets)");
    const uint64_t nbytes = numel * c10::elementSize(e.dtype);
    VOLT_CHECK(e.end - e.begin == nbytes, CheckpointError, tw, " has data_offsets [", e.begin, ", ", e.end, "] (",
               e.end - e.begin, " bytes), but shape ", shape_text(e.shape), " of ", dt, " needs ", nbytes, " bytes");
    entries_[name] = std::move(e);
  }
  // The tensors must cover the data exactly once, back to back.
  std::vector<std::pair<const std::string*, const SafetensorsEntry*>> order;
  for (const auto& [name, e] : entries_) order.emplace_back(&name, &e);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::make_pair(a.second->begin, a.second->end) < std::make_pair(b.second->begin, b.second->end);
  });
  uint64_t pos = 0;
  const std::string* prev = nullptr;
  for (const auto& [name, e] : order) {
    VOLT_CHECK(e->begin >= pos, CheckpointError, where, ": tensor '", *name, "' (data bytes [", e->begin, ", ", e->end,
               ")) overlaps tensor '", prev ? *prev : std::string(), "' (which ends at ", pos, ")");
    VOLT_CHECK(e->begin == pos, CheckpointError, where, ": data bytes [", pos, ", ", e->begin,
               ") belong to no tensor (a gap before tensor '", *name,
               "'): the offsets do not cover the data contiguously");
    pos = e->end;
    prev = name;
  }
  VOLT_CHECK(pos == data_size, CheckpointError, where, ": data bytes [", pos, ", ", data_size,
             ") after the last tensor belong to no tensor: the offsets do not cover the data contiguously");
}

std::vector<std::string> SafetensorsReader::names() const {
  std::vector<std::string> out;
  for (const auto& kv : entries_) out.push_back(kv.first);
  return out;
}

const SafetensorsEntry& SafetensorsReader::entry(const std::string& name) const {
  auto it = entries_.find(name);
  VOLT_CHECK(it != entries_.end(), CheckpointError, "safetensors file '", path_, "' has no tensor '", name, "'");
  return it->second;
}

torch::Tensor SafetensorsReader::read(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  torch::Tensor out = torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype));
  auto* p = static_cast<char*>(out.data_ptr());
  const uint64_t n = e.end - e.begin;
  uint64_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd_, p + done, n - done, static_cast<off_t>(data_start_ + e.begin + done));
    if (r < 0 && errno == EINTR) continue;
    VOLT_CHECK(r > 0, CheckpointError, "reading tensor '", name, "' of safetensors file '", path_,
               "' failed: ", r == 0 ? "unexpected end of file (truncated since it was opened?)" : std::strerror(errno));
    done += static_cast<uint64_t>(r);
  }
  if (e.dtype == at::kBool) {
    const auto* b = reinterpret_cast<const unsigned char*>(p);
    VOLT_CHECK(std::all_of(b, b + n, [](unsigned char c) { return c <= 1; }), CheckpointError, "safetensors file '",
               path_, "': BOOL tensor '", name, "' holds bytes other than 0 and 1 (corrupted)");
  }
  return out;
}

std::map<std::string, torch::Tensor> SafetensorsReader::read_all() const {
  std::map<std::string, torch::Tensor> out;
  for (const auto& kv : entries_) out[kv.first] = read(kv.first);
  return out;
}

// ---------------------------------------------------------------------------------------------
// writer

SafetensorsWriter::SafetensorsWriter(std::string path, const std::map<std::string, Spec>& tensors,
                                     const std::map<std::string, std::string>& metadata)
    : path_(std::move(path)) {
  const std::string where = "safetensors file '" + path_ + "'";
  // The reference layout: larger items first, then by name; with the header padded to 8 bytes,
  // every tensor starts at a multiple of its item size.
  std::vector<std::string> order;
  for (const auto& [name, spec] : tensors) {
    VOLT_CHECK(name != "__metadata__", CheckpointError, where, ": '__metadata__' cannot name a tensor");
    SafetensorsEntry e;
    e.dtype = spec.dtype;
    e.shape = spec.shape;
    e.numel = 1;
    for (auto d : spec.shape) {
      VOLT_CHECK(d >= 0, CheckpointError, where, ": tensor '", name, "' has a negative dimension");
      e.numel *= d;
    }
    (void)safetensors_dtype_name(spec.dtype, where + ": tensor '" + name + "'");
    entries_[name] = std::move(e);
    written_[name] = false;
    order.push_back(name);
  }
  std::stable_sort(order.begin(), order.end(), [&](const std::string& a, const std::string& b) {
    return c10::elementSize(entries_[a].dtype) > c10::elementSize(entries_[b].dtype);
  });
  json header = json::object();
  if (!metadata.empty()) {
    json m = json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = m;
  }
  for (const auto& name : order) {
    SafetensorsEntry& e = entries_[name];
    e.begin = total_;
    e.end = total_ + static_cast<uint64_t>(e.numel) * c10::elementSize(e.dtype);
    total_ = e.end;
    header[name] = {
        {"dtype", safetensors_dtype_name(e.dtype, name)}, {"shape", e.shape}, {"data_offsets", {e.begin, e.end}}};
  }
  std::string text;
  try {
    text = header.dump(-1, ' ', false, json::error_handler_t::strict);
  } catch (const json::exception& e) {
    throw CheckpointError(
        detail::str_cat(where, ": a tensor name or metadata entry is not valid UTF-8 (", e.what(), ")"));
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  data_start_ = 8 + text.size();
  std::string head(8, '\0');
  for (int i = 0; i < 8; ++i) head[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  head += text;

  create_parent_dirs(path_);
  tmp_ = detail::claim_temp_sibling(path_);
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  VOLT_CHECK(fd_ >= 0, CheckpointError, "cannot open '", tmp_, "' for writing ", where, ": ", std::strerror(errno));
  try {
    pwrite_all(head.data(), head.size(), 0, "its header");
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    ::unlink(tmp_.c_str());
    throw;
  }
}

SafetensorsWriter::~SafetensorsWriter() {
  if (committed_) return;
  if (fd_ >= 0) ::close(fd_);
  ::unlink(tmp_.c_str());
}

void SafetensorsWriter::pwrite_all(const void* data, uint64_t n, uint64_t offset, const std::string& what) {
  const char* p = static_cast<const char*>(data);
  uint64_t done = 0;
  while (done < n) {
    const ssize_t w = ::pwrite(fd_, p + done, n - done, static_cast<off_t>(offset + done));
    if (w < 0 && errno == EINTR) continue;
    VOLT_CHECK(w > 0, CheckpointError, "writing ", what, " to safetensors file '", path_,
               "' failed: ", w < 0 ? std::strerror(errno) : "no space left",
               "; the previous file at that path is untouched");
    done += static_cast<uint64_t>(w);
  }
}

void SafetensorsWriter::add(const std::string& name, const torch::Tensor& t) {
  const std::string where = "safetensors file '" + path_ + "'";
  VOLT_CHECK(!committed_, CheckpointError, where, ": add() after commit()");
  auto it = entries_.find(name);
  VOLT_CHECK(it != entries_.end(), CheckpointError, where, ": tensor '", name, "' was not declared");
  VOLT_CHECK(!written_[name], CheckpointError, where, ": tensor '", name, "' written twice");
  const SafetensorsEntry& e = it->second;
  VOLT_CHECK(t.defined(), CheckpointError, where, ": tensor '", name, "' is undefined");
  VOLT_CHECK(t.scalar_type() == e.dtype && t.sizes().vec() == e.shape, CheckpointError, where, ": tensor '", name,
             "' is ", c10::toString(t.scalar_type()), " ", shape_text(t.sizes().vec()), ", declared ",
             c10::toString(e.dtype), " ", shape_text(e.shape));
  const torch::Tensor c = t.detach().to(torch::kCPU).contiguous();
  if (e.end > e.begin) pwrite_all(c.data_ptr(), e.end - e.begin, data_start_ + e.begin, "tensor '" + name + "'");
  written_[name] = true;
}

uint64_t SafetensorsWriter::commit() {
  const std::string where = "safetensors file '" + path_ + "'";
  VOLT_CHECK(!committed_, CheckpointError, where, ": commit() twice");
  for (const auto& [name, done] : written_)
    VOLT_CHECK(done, CheckpointError, where, ": tensor '", name, "' was declared but never written");
  const uint64_t size = data_start_ + total_;
  int err = 0;
  if (::ftruncate(fd_, static_cast<off_t>(size)) != 0 || ::fsync(fd_) != 0) err = errno;
  if (::close(fd_) != 0 && err == 0) err = errno;
  fd_ = -1;
  if (err != 0) {
    throw CheckpointError(
        detail::str_cat("flushing ", where, " failed: ", std::strerror(err), "; the previous file is untouched"));
  }
  VOLT_CHECK(::rename(tmp_.c_str(), path_.c_str()) == 0, CheckpointError, "renaming '", tmp_, "' to '", path_,
             "' failed: ", std::strerror(errno));
  committed_ = true;
  const fs::path target(path_);
  detail::fsync_dir(target.has_parent_path() ? target.parent_path().string() : ".");
  return size;
}

uint64_t save_safetensors(const std::map<std::string, torch::Tensor>& tensors, const std::string& path,
                          const std::map<std::string, std::string>& metadata) {
  std::map<std::string, SafetensorsWriter::Spec> specs;
  for (const auto& [name, t] : tensors) {
    VOLT_CHECK(t.defined(), CheckpointError, "safetensors file '", path, "': tensor '", name, "' is undefined");
    specs[name] = {t.scalar_type(), t.sizes().vec()};
  }
  SafetensorsWriter w(path, specs, metadata);
  for (const auto& [name, t] : tensors) w.add(name, t);
  return w.commit();
}

std::map<std::string, torch::Tensor> load_safetensors(const std::string& path) {
  return SafetensorsReader(path).read_all();
}

}  // namespace volt
