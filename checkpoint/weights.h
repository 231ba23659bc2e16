#pragma once
/// Weights from elsewhere: loading a module's parameters and buffers from a file that volt's
/// training did not write, and writing them for other tools.
///
/// load_weights recognises the format from the file's content, not its name:
///   volt        a volt checkpoint, full file or sharded folder: its "state_dict" section
///   torch.save  a zip written by Python's torch.save: a state_dict (OrderedDict), a plain or
///               nested dict of tensors, a Lightning checkpoint (its "state_dict" is used), a
///               pickled nn.Module (see torch_save.h). The legacy non-zip format is refused with
///               how to save it again.
///   torchscript a TorchScript archive (torch.jit.save) or LibTorch's torch::save(module): its
///               named parameters and buffers
///   safetensors Hugging Face's format (see safetensors.h)
/// Names are matched against the module's named_parameters() and named_buffers(), which for a
/// LibTorch module mirroring a Python one are the Python state_dict's names. Values are copied into
/// the existing tensors (their device and dtype stay; a file's other dtype is cast, as
/// load_state_dict does) under NoGradGuard, one tensor in memory at a time.
#include <torch/nn/module.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace volt {

struct LoadWeightsOptions {
  /// Any module tensor absent from the file, any file tensor the module lacks, or any shape
  /// mismatch is a CheckpointError listing them all (with shapes). Off: the matching tensors load,
  /// the rest are reported (and logged as a warning).
  bool strict = true;
  /// Only the file's names that start with this are used, with it removed ("model." loads a
  /// Lightning module's `self.model` into the bare model). A prefix no name starts with is an error.
  std::string prefix;

  template <class V>
  void visit(V& v) {
    v("strict", strict)("prefix", prefix);
  }
};

/// What load_weights did. Names are the module's (file names with the prefix removed).
struct LoadWeightsReport {
  /// "volt (full)", "volt (sharded)", "torch.save", "torchscript" or "safetensors".
  std::string format;
  /// Tensors copied into the module.
  int64_t loaded = 0;
  /// In the module, not in the file (left as they were).
  std::vector<std::string> missing;
  /// In the file, not in the module (ignored).
  std::vector<std::string> unexpected;
  /// In both with other shapes (left as they were; only without strict).
  std::vector<std::string> mismatched;
  /// Loaded from another dtype, cast to the module's.
  std::vector<std::string> converted;
  /// File tensors outside the prefix (or outside a Lightning checkpoint's state_dict).
  int64_t skipped = 0;
};

/// Loads the weights in `path` (file or sharded folder, format as above) into `module`'s parameters
/// and buffers. Throws CheckpointError naming the file and the problem: unreadable or damaged
/// file, unknown format, and under `strict` every missing, unexpected and mismatched tensor.
/// Names, shapes and the format are all checked before the first copy; a read that fails part-way
/// (a damaged tensor) leaves the tensors before it loaded. Thread-safety: none on `module`; files
/// are only read.
LoadWeightsReport load_weights(torch::nn::Module& module, const std::string& path,
                               const LoadWeightsOptions& options = {});

/// Writes `module`'s named parameters and buffers as a safetensors file at `path`, atomically
/// (safetensors.h). `metadata` gets "format": "pt" unless it has a "format" (Hugging Face's
/// loaders check it). Returns the file's size.
uint64_t save_safetensors(const torch::nn::Module& module, const std::string& path,
                          std::map<std::string, std::string> metadata = {});

}  // namespace volt
