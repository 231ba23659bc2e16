#pragma once
/// A training checkpoint as Lightning defines one: epoch, global_step, model state (user's parameter
/// names), optimizer and scheduler states, loop and callback states, hyper-parameters. Tensors go
/// in `state_dict` / `optimizer_state`; everything else is YAML in `meta`.
///
/// On disk ("full" format) it is a torch.save-compatible zip (torch::pickle_save of a dict), so
/// Python's `torch.load(path)["state_dict"]` gives the weights with the Python model's names.
#include <torch/types.h>
#include <yaml-cpp/yaml.h>

#include <map>
#include <string>

namespace volt {

inline constexpr int64_t kCheckpointFormatVersion = 1;

struct Checkpoint {
  int64_t epoch = 0;
  int64_t global_step = 0;
  std::map<std::string, torch::Tensor> state_dict;
  /// Optimizer state as named tensors: "<param name>.<state key>" (e.g. "fc.weight.exp_avg") plus
  /// "step" entries; the layout is the strategy's (see Strategy::optimizer_state_dict).
  std::map<std::string, torch::Tensor> optimizer_state;
  /// loops, callbacks, lr_schedulers, hyper_parameters, precision, config, volt_version, extra.
  YAML::Node meta = YAML::Node(YAML::NodeType::Map);
};

/// Writes `ckpt` to `path` atomically (temporary file, fsync, rename, fsync of the directory) with a
/// checksum of every tensor. Throws CheckpointError naming the file on any I/O failure; on failure
/// an existing file at `path` is left untouched.
void save_checkpoint_file(const Checkpoint& ckpt, const std::string& path);

/// Reads and verifies a checkpoint written by save_checkpoint_file. Throws CheckpointError naming
/// the file and the problem (missing, truncated, corrupted, wrong format version).
Checkpoint load_checkpoint_file(const std::string& path);

namespace detail {
/// 64-bit FNV-1a of a tensor's bytes (contiguous copy if needed).
uint64_t tensor_checksum(const torch::Tensor& t);
/// Writes bytes to `path` atomically; throws CheckpointError.
void atomic_write(const std::string& path, const char* data, size_t size);
}  // namespace detail

}  // namespace volt
