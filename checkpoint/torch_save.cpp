#include "volt/checkpoint/torch_save.h"

#include <caffe2/serialize/inline_container.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <unordered_set>

#include "volt/checkpoint/pickle.h"
#include "volt/checkpoint/tensor_archive.h"
#include "volt/core/errors.h"

namespace volt {

namespace {

using detail::Py;
using detail::PyObj;

/// A dict key as a name part: strings as they are, integers in decimal; others have no name.
bool key_text(const Py& k, std::string& out) {
  if (k->kind == PyObj::Kind::Str) {
    out = k->s;
    return true;
  }
  if (k->kind == PyObj::Kind::Int) {
    out = std::to_string(k->i);
    return true;
  }
  return false;
}

const Py* dict_get(const PyObj& d, const std::string& key) {
  for (const auto& [k, v] : d.entries)
    if (k->kind == PyObj::Kind::Str && k->s == key) return &v;
  return nullptr;
}

}  // namespace

/// The most data.pkl may hold decompressed: a pickle describes tensors, it does not hold them (a
/// state dict of 100,000 tensors pickles to about 10 MB).
constexpr uint64_t kMaxPickleBytes = uint64_t{256} << 20;

struct TorchSaveReader::Impl {
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> zip;
  /// Record name (without the archive's folder) -> the size it declares decompressed, for the
  /// compressed records: checked before LibTorch allocates that much to inflate one.
  std::map<std::string, uint64_t> inflated;
  std::map<std::string, Py> tensors;
  std::map<std::string, Info> infos;
  std::string where;
  std::vector<std::string>* names = nullptr;
  std::unordered_set<const PyObj*> path;  // objects on the current walk (a pickle may hold cycles)

  void add(const std::string& name, const Py& t) {
    VOLT_CHECK(!tensors.count(name), CheckpointError, where, ": two tensors are both named '", name,
               "' (a dict key with dots that repeats a nested one)");
    const int64_t numel = t->storage->numel;
    bool empty = false, overflow = t->offset < 0;
    int64_t last = t->offset;
    for (size_t k = 0; k < t->size.size(); ++k) {
      VOLT_CHECK(t->size[k] >= 0 && t->stride[k] >= 0, CheckpointError, where, ": tensor '", name,
                 "' has a negative size or stride");
      empty = empty || t->size[k] == 0;
      int64_t span = 0;
      overflow = overflow || __builtin_mul_overflow(std::max<int64_t>(t->size[k] - 1, 0), t->stride[k], &span) ||
                 __builtin_add_overflow(last, span, &last);
    }
    VOLT_CHECK(!overflow && (empty || last < numel), CheckpointError, where, ": tensor '", name,
               "' lies outside its storage of ", numel, " elements (damaged file)");
    tensors[name] = t;
    infos[name] = {t->storage->dtype, t->size};
    names->push_back(name);
  }

  static std::string join(const std::string& prefix, const std::string& part) {
    return prefix.empty() ? part : prefix + "." + part;
  }

  void walk(const Py& v, const std::string& name) {
    if (v->kind == PyObj::Kind::Tensor) return add(name, v);
    if (!path.insert(v.get()).second) return;
    VOLT_CHECK(path.size() < 1000, CheckpointError, where, ": containers nested over 1000 deep at '", name,
               "' (damaged file)");
    std::string k;
    switch (v->kind) {
      case PyObj::Kind::Dict:
        for (const auto& [key, val] : v->entries)
          if (key_text(key, k)) walk(val, join(name, k));
        break;
      case PyObj::Kind::List:
      case PyObj::Kind::Tuple:
        for (size_t i = 0; i < v->items.size(); ++i) walk(v->items[i], join(name, std::to_string(i)));
        break;
      case PyObj::Kind::Object:
        // Tensors of another layout than strided are rebuilt by their own functions: say so,
        // rather than report them missing.
        for (const char* kind : {"sparse", "qtensor", "nested", "mkldnn"})
          VOLT_CHECK(v->s.rfind(std::string("torch._utils._rebuild_") + kind, 0) != 0, CheckpointError, where,
                     ": tensor '", name, "' is a ", kind == std::string("qtensor") ? "quantized" : kind, " tensor (",
                     v->s, "); volt loads dense (strided) tensors only: save it converted ",
                     "(t.to_dense(), t.dequantize())");
        if (v->state && v->state->kind == PyObj::Kind::Dict && dict_get(*v->state, "_parameters") &&
            dict_get(*v->state, "_modules")) {
          walk_module(*v->state, name);
          break;
        }
        for (const auto& [key, val] : v->entries)
          if (key_text(key, k)) walk(val, join(name, k));
        for (size_t i = 0; i < v->items.size(); ++i) walk(v->items[i], join(name, std::to_string(i)));
        if (v->state) walk(v->state, name);
        break;
      default:
        break;
    }
    path.erase(v.get());
  }

  /// A pickled nn.Module: its parameters, persistent buffers and submodules, as state_dict() names them.
  void walk_module(const PyObj& state, const std::string& name) {
    std::set<std::string> non_persistent;
    if (const Py* np = dict_get(state, "_non_persistent_buffers_set"))
      for (const Py& s : (*np)->items) non_persistent.insert(s->s);
    std::string k;
    for (const char* field : {"_parameters", "_buffers"})
      if (const Py* d = dict_get(state, field))
        for (const auto& [key, val] : (*d)->entries)
          if (key_text(key, k) && val->kind == PyObj::Kind::Tensor && !non_persistent.count(k)) add(join(name, k), val);
    if (const Py* d = dict_get(state, "_modules"))
      for (const auto& [key, val] : (*d)->entries)
        if (key_text(key, k)) walk(val, join(name, k));
  }
};

TorchSaveReader::TorchSaveReader(std::string path) : path_(std::move(path)), impl_(std::make_unique<Impl>()) {
  const std::string where = "torch.save file '" + path_ + "'";
  impl_->where = where;
  impl_->names = &names_;
  VOLT_CHECK(std::filesystem::is_regular_file(path_), CheckpointError, where, " does not exist or is not a file");
  std::string pickle;
  for (const auto& e : detail::zip_entries(path_))
    if (e.method != 0) impl_->inflated[e.name.substr(e.name.find('/') + 1)] = e.uncompressed;
  if (auto it = impl_->inflated.find("data.pkl"); it != impl_->inflated.end())
    VOLT_CHECK(it->second <= kMaxPickleBytes, CheckpointError, where, ": its compressed data.pkl declares ", it->second,
               " bytes once inflated; a torch.save pickle is far smaller (at most ", kMaxPickleBytes,
               " bytes are read): refused as damaged or hostile");
  try {
    impl_->zip = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path_);
    VOLT_CHECK(impl_->zip->hasRecord("data.pkl"), CheckpointError, where,
               " is a zip without data.pkl: not written by torch.save");
    if (impl_->zip->hasRecord("byteorder")) {
      auto [d, n] = impl_->zip->getRecord("byteorder");
      const std::string order(static_cast<const char*>(d.get()), n);
      VOLT_CHECK(order == "little", CheckpointError, where, " holds ", order, "-endian tensors; only little-endian");
    }
    auto [data, size] = impl_->zip->getRecord("data.pkl");
    pickle.assign(static_cast<const char*>(data.get()), size);
  } catch (const c10::Error& e) {
    throw CheckpointError(detail::str_cat(where, " cannot be read as a zip (truncated or damaged?): ",
                                          std::string(e.what_without_backtrace()).substr(0, 300)));
  }
  const Py root = detail::unpickle(pickle.data(), pickle.size(), where);
  impl_->walk(root, "");
  if (root->kind == PyObj::Kind::Dict)
    for (const auto& [k, v] : root->entries)
      if (k->kind == PyObj::Kind::Str && (v->kind == PyObj::Kind::Dict || v->kind == PyObj::Kind::Object))
        top_level_dicts_.insert(k->s);
}

TorchSaveReader::~TorchSaveReader() = default;

bool TorchSaveReader::has(const std::string& name) const { return impl_->tensors.count(name) > 0; }

const TorchSaveReader::Info& TorchSaveReader::info(const std::string& name) const {
  auto it = impl_->infos.find(name);
  VOLT_CHECK(it != impl_->infos.end(), CheckpointError, impl_->where, " has no tensor '", name, "'");
  return it->second;
}

torch::Tensor TorchSaveReader::read(const std::string& name) const {
  (void)info(name);
  const Py& t = impl_->tensors.at(name);
  const PyObj& s = *t->storage;
  const std::string record = "data/" + s.key;
  at::DataPtr data;
  size_t size = 0;
  const size_t need = static_cast<size_t>(s.numel) * c10::elementSize(s.dtype);
  if (auto it = impl_->inflated.find(record); it != impl_->inflated.end())
    VOLT_CHECK(it->second <= need, CheckpointError, impl_->where, ": the compressed record '", record, "' of tensor '",
               name, "' declares ", it->second, " bytes once inflated, its storage ", need,
               " bytes: refused as damaged or hostile");
  try {
    VOLT_CHECK(impl_->zip->hasRecord(record), CheckpointError, impl_->where, " lacks the record '", record,
               "' of tensor '", name, "' (damaged)");
    std::tie(data, size) = impl_->zip->getRecord(record);
  } catch (const c10::Error& e) {
    throw CheckpointError(detail::str_cat(impl_->where, ": reading tensor '", name,
                                          "' failed: ", std::string(e.what_without_backtrace()).substr(0, 300)));
  }
  VOLT_CHECK(size >= need, CheckpointError, impl_->where, ": the storage of tensor '", name, "' holds ", size,
             " bytes, fewer than its ", need, " (damaged)");
  at::Storage storage(at::Storage::use_byte_size_t(), size, std::move(data), /*allocator=*/nullptr,
                      /*resizable=*/false);
  at::Tensor whole = at::empty({0}, at::TensorOptions().dtype(s.dtype)).set_(storage, 0, {s.numel}, {1});
  return whole.as_strided(t->size, t->stride, t->offset);
}

namespace detail {

std::vector<std::string> zip_records(const std::string& path) {
  try {
    caffe2::serialize::PyTorchStreamReader zip(path);
    return zip.getAllRecords();
  } catch (const c10::Error& e) {
    throw CheckpointError(str_cat("'", path, "' looks like a zip file but cannot be read (truncated or damaged?): ",
                                  std::string(e.what_without_backtrace()).substr(0, 300)));
  }
}

}  // namespace detail

}  // namespace volt
