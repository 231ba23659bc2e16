#pragma once
/// Reading the tensors of a file written by Python's `torch.save` (the zip format, the default since
/// PyTorch 1.6): `torch.save(model.state_dict())`, a plain or nested dict of tensors, a Lightning
/// checkpoint, even a whole pickled nn.Module.
///
/// LibTorch's own unpickler (torch::pickle_load) cannot read these: in 1.13 it turns
/// `collections.OrderedDict`, the type of every state_dict, into None. This reader runs the pickle
/// opcodes itself (pickle.h) and executes nothing: `OrderedDict`/`dict` become dicts, the tensor rebuild
/// functions become tensors, and any other class becomes an inert object whose dict items, list
/// items and attributes are still searched for tensors. Tensor bytes stay in the file until read().
///
/// Names: the path of dict keys (strings, or integers in decimal) and list indices from the top,
/// joined by "."; a pickled nn.Module contributes its parameters, persistent buffers and submodules
/// as state_dict() would name them.
///
/// Ownership: holds the zip open. Thread-safety: const methods may run concurrently.
#include <torch/types.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

namespace volt {

class TorchSaveReader {
 public:
  struct Info {
    at::ScalarType dtype = at::kFloat;
    std::vector<int64_t> shape;
  };
  /// Opens `path` and parses its pickle. Throws CheckpointError naming the file and the problem:
  /// not a zip (a legacy torch.save file says to save it again in the zip format), a TorchScript
  /// archive, a malformed pickle, a tensor outside its storage, or one name reached twice.
  explicit TorchSaveReader(std::string path);
  ~TorchSaveReader();
  TorchSaveReader(const TorchSaveReader&) = delete;
  TorchSaveReader& operator=(const TorchSaveReader&) = delete;

  const std::string& path() const { return path_; }
  /// Every tensor's name, in the pickle's order.
  const std::vector<std::string>& names() const { return names_; }
  bool has(const std::string& name) const;
  /// Throws CheckpointError if absent.
  const Info& info(const std::string& name) const;
  /// The tensor, on the CPU (whatever device it was saved from). Throws CheckpointError if absent or
  /// its storage record is missing or short.
  torch::Tensor read(const std::string& name) const;
  /// The keys of the top-level dict whose values are dicts (Lightning's "state_dict", say).
  const std::set<std::string>& top_level_dicts() const { return top_level_dicts_; }

  struct Impl;

 private:
  std::string path_;
  std::unique_ptr<Impl> impl_;
  std::vector<std::string> names_;
  std::set<std::string> top_level_dicts_;
};

namespace detail {
/// The record names of the zip archive at `path` (without the archive's top folder). Throws
/// CheckpointError naming the file if it cannot be read as one.
std::vector<std::string> zip_records(const std::string& path);
}  // namespace detail

}  // namespace volt
