#pragma once
/// A flat dict of named tensors in the file format of Python's `torch.save` (a zip: data.pkl and one
/// record per storage), written so that `torch.load(path)` and `torch.load(path, weights_only=True)`
/// (PyTorch 2.6+'s default) read it: a plain dict, tensors rebuilt by
/// torch._utils._rebuild_tensor_v2, nothing else. LibTorch's torch::pickle_save tags the dict with
/// torch.jit._pickle.restore_type_tag, which weights_only refuses ("Unsupported global"); LibTorch's
/// torch::pickle_load and volt's TorchSaveReader read both.
///
/// Thread-safety: independent calls may run concurrently.
#include <torch/types.h>

#include <string>
#include <utility>
#include <vector>

namespace volt {

/// Writes `entries` (keys unique, in this order; undefined tensors left out; any device, copied to
/// the host) to `path` atomically (temporary file, fsync, rename); creates its folder. Throws
/// CheckpointError naming the file, or a repeated key.
void save_tensor_dict(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& entries);

}  // namespace volt
