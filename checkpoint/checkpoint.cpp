#include "volt/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <torch/serialize.h>
#include <torch/torch.h>

#include "volt/core/errors.h"

namespace volt {

namespace fs = std::filesystem;

namespace detail {

uint64_t tensor_checksum(const torch::Tensor& t) {
  auto c = t.contiguous();
  const auto* p = static_cast<const unsigned char*>(c.data_ptr());
  const size_t n = c.numel() * c.element_size();
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ULL;
  }
  return h;
}

void atomic_write(const std::string& path, const char* data, size_t size) {
  const fs::path target(path);
  if (target.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(target.parent_path(), ec);
    VOLT_CHECK(!ec, CheckpointError, "cannot write checkpoint '", path, "': cannot create directory '",
               target.parent_path().string(), "': ", ec.message());
  }
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
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
      throw CheckpointError(str_cat("writing checkpoint '", path, "' failed after ", done, " of ", size,
                                    " bytes: ", std::strerror(err), "; the previous file is untouched"));
    }
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw CheckpointError(str_cat("flushing checkpoint '", path, "' failed: ", std::strerror(err)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw CheckpointError(str_cat("renaming '", tmp, "' to '", path, "' failed: ", std::strerror(err)));
  }
  const std::string dir = target.has_parent_path() ? target.parent_path().string() : ".";
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace detail

namespace {

c10::impl::GenericDict tensor_dict(const std::map<std::string, torch::Tensor>& m, YAML::Node& sums) {
  c10::Dict<std::string, at::Tensor> d;
  for (const auto& [k, v] : m) {
    auto t = v.detach().cpu().contiguous();
    d.insert(k, t);
    sums[k] = std::to_string(detail::tensor_checksum(t));
  }
  return c10::impl::toGenericDict(d);
}

std::map<std::string, torch::Tensor> tensor_map(const c10::IValue& v, const YAML::Node& sums, const std::string& path,
                                                const char* section) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& kv : v.toGenericDict()) {
    const std::string k = kv.key().toStringRef();
    auto t = kv.value().toTensor();
    VOLT_CHECK(sums[k], CheckpointError, "checkpoint '", path, "': ", section, " tensor '", k, "' has no checksum");
    VOLT_CHECK(std::to_string(detail::tensor_checksum(t)) == sums[k].as<std::string>(), CheckpointError,
               "checkpoint '", path, "' is corrupted: checksum mismatch for ", section, " tensor '", k, "'");
    out[k] = t;
  }
  return out;
}

}  // namespace

void save_checkpoint_file(const Checkpoint& ckpt, const std::string& path) {
  YAML::Node sums_model(YAML::NodeType::Map), sums_opt(YAML::NodeType::Map);
  c10::impl::GenericDict root(c10::StringType::get(), c10::AnyType::get());
  root.insert("epoch", ckpt.epoch);
  root.insert("global_step", ckpt.global_step);
  root.insert("state_dict", tensor_dict(ckpt.state_dict, sums_model));
  root.insert("optimizer_states", tensor_dict(ckpt.optimizer_state, sums_opt));
  YAML::Node meta = YAML::Clone(ckpt.meta);
  meta["checksums"]["state_dict"] = sums_model;
  meta["checksums"]["optimizer_states"] = sums_opt;
  root.insert("volt_meta", YAML::Dump(meta));
  root.insert("format_version", kCheckpointFormatVersion);
  std::vector<char> bytes = torch::pickle_save(root);
  detail::atomic_write(path, bytes.data(), bytes.size());
}

Checkpoint load_checkpoint_file(const std::string& path) {
  VOLT_CHECK(fs::exists(path), CheckpointError, "checkpoint '", path, "' does not exist");
  VOLT_CHECK(fs::is_regular_file(path), CheckpointError, "checkpoint '", path, "' is not a file");
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  VOLT_CHECK(!bytes.empty(), CheckpointError, "checkpoint '", path, "' is empty (truncated write?)");
  c10::IValue root;
  try {
    root = torch::pickle_load(bytes);
  } catch (const std::exception& e) {
    throw CheckpointError(detail::str_cat("checkpoint '", path, "' is truncated or not a volt checkpoint: ",
                                          std::string(e.what()).substr(0, 200)));
  }
  VOLT_CHECK(root.isGenericDict(), CheckpointError, "checkpoint '", path, "' is not a volt checkpoint (no dict at top)");
  auto d = root.toGenericDict();
  for (const char* k : {"epoch", "global_step", "state_dict", "optimizer_states", "volt_meta", "format_version"})
    VOLT_CHECK(d.contains(k), CheckpointError, "checkpoint '", path, "' lacks '", k, "': not a volt checkpoint");
  const int64_t fv = d.at("format_version").toInt();
  VOLT_CHECK(fv == kCheckpointFormatVersion, CheckpointError, "checkpoint '", path, "' has format version ", fv,
             "; this volt reads version ", kCheckpointFormatVersion);
  Checkpoint c;
  c.epoch = d.at("epoch").toInt();
  c.global_step = d.at("global_step").toInt();
  c.meta = YAML::Load(d.at("volt_meta").toStringRef());
  c.state_dict = tensor_map(d.at("state_dict"), c.meta["checksums"]["state_dict"], path, "model");
  c.optimizer_state = tensor_map(d.at("optimizer_states"), c.meta["checksums"]["optimizer_states"], path, "optimizer");
  c.meta.remove("checksums");
  return c;
}

}  // namespace volt
