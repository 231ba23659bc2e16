#pragma once
/// Python's pickle virtual machine, without executing anything: the values a torch.save pickle
/// builds, as far as finding its tensors needs (torch_save.h walks them). `collections.OrderedDict`
/// and `dict` become dicts; torch's tensor rebuild functions become tensors that point at a storage
/// record of the zip; every other class becomes an inert object that keeps the items, entries and
/// attributes the pickle gives it. Every read is bounds-checked: a damaged pickle is a
/// CheckpointError naming `where`, never a crash.
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace volt::detail {

struct PyObj;
using Py = std::shared_ptr<PyObj>;

/// One value of the pickle.
struct PyObj {
  enum class Kind { None, Bool, Int, Float, Str, Bytes, Tuple, List, Set, Dict, Global, Object, Storage, Tensor };
  Kind kind = Kind::None;
  int64_t i = 0;
  std::string s;                           // Str, Bytes; Global and Object: "module.name"
  std::vector<Py> items;                   // Tuple, List, Set; Object: appended items
  std::vector<std::pair<Py, Py>> entries;  // Dict; Object: set items
  Py state;                                // Object: BUILD's state (its attributes)
  // Storage: a record of the zip, data/<key>
  std::string key;
  at::ScalarType dtype = at::kFloat;
  int64_t numel = 0;
  // Tensor: a view of a storage
  Py storage;
  int64_t offset = 0;
  std::vector<int64_t> size, stride;

  PyObj() = default;
  PyObj(const PyObj&) = delete;
  PyObj& operator=(const PyObj&) = delete;
  /// Frees the values it holds one by one, not recursively: a pickle can nest 100,000 deep.
  ~PyObj();
};

/// The value `data` (a whole pickle, up to its STOP) builds. Throws CheckpointError naming `where`.
Py unpickle(const char* data, size_t size, const std::string& where);

}  // namespace volt::detail
