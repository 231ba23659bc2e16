#pragma once
/// A training checkpoint as Lightning defines one: epoch, global_step, model state (the user's
/// parameter names), optimizer and scheduler states, loop and callback states, RNG states of every
/// rank, precision, the resolved config, hyper-parameters, the volt and format versions.
///
/// Two formats on disk (the reader recognises which by itself, see CheckpointReader):
///   "full"    one file, torch.load-compatible (see tensor_archive.h); written by rank 0.
///   "sharded" a folder: one such file per rank, `manifest.yaml` (every tensor's name, global
///             shape, dtype and which rank holds which flat range) and a `COMPLETE` marker written
///             last (see ShardedCheckpointWriter).
/// Tensors live in sections: "state_dict" (model), "optimizer_states" ("<param>.<field>", e.g.
/// "fc.weight.exp_avg"), "rng_states" ("rank<r>.cpu", "rank<r>.cuda"), "extra_tensors" (the
/// on_save_checkpoint hooks' tensors of every rank, "rank<r>.<name>"). Everything else is YAML in
/// `meta`: loops, callbacks, lr_schedulers, hyper_parameters, precision, strategy, config,
/// volt_version, torch_version, extra (on_save_checkpoint's).
#include <torch/types.h>
#include <yaml-cpp/yaml.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace volt {

inline constexpr int64_t kCheckpointFormatVersion = 2;

inline constexpr const char* kModelSection = "state_dict";
inline constexpr const char* kOptimizerSection = "optimizer_states";
inline constexpr const char* kRngSection = "rng_states";
/// The tensors the on_save_checkpoint hooks added (CheckpointMeta::tensors), "rank<r>.<name>".
inline constexpr const char* kExtraTensorSection = "extra_tensors";

/// A whole checkpoint in memory: what save_checkpoint_file writes and load_checkpoint_file reads.
struct Checkpoint {
  int64_t epoch = 0;
  int64_t global_step = 0;
  std::map<std::string, torch::Tensor> state_dict;
  std::map<std::string, torch::Tensor> optimizer_state;
  std::map<std::string, torch::Tensor> rng_states;     // "rank<r>.cpu", ...
  std::map<std::string, torch::Tensor> extra_tensors;  // "rank<r>.<name>"
  YAML::Node meta = YAML::Node(YAML::NodeType::Map);
};

/// What a streaming writer records besides the state it streams (state_io.h): epoch, global_step,
/// the metadata, this rank's own generators ("cpu", "cuda") and this rank's hook tensors.
struct CheckpointHeader {
  int64_t epoch = 0;
  int64_t global_step = 0;
  YAML::Node meta = YAML::Node(YAML::NodeType::Map);
  std::map<std::string, torch::Tensor> rng_states;
  /// This rank's CheckpointMeta::tensors by their own names: every rank must hold the same names,
  /// shapes and dtypes (save_state checks it on every rank); stored as "rank<r>.<name>".
  std::map<std::string, torch::Tensor> extra_tensors;

  CheckpointHeader() = default;
  /// The header fields of an in-memory checkpoint (its tensors are not part of a header).
  CheckpointHeader(const Checkpoint& c)  // NOLINT: implicit on purpose
      : epoch(c.epoch),
        global_step(c.global_step),
        meta(c.meta),
        rng_states(c.rng_states),
        extra_tensors(c.extra_tensors) {}
};

/// Writes `ckpt` as a full checkpoint at `path`, atomically (temporary file, fsync, rename, fsync
/// of the directory), with checksums. Throws CheckpointError naming the file on any I/O failure;
/// on failure an existing checkpoint at `path` is left untouched.
void save_checkpoint_file(const Checkpoint& ckpt, const std::string& path);

/// Reads and verifies a whole checkpoint of either format (a sharded one is assembled). Throws
/// CheckpointError naming the file and the problem.
Checkpoint load_checkpoint_file(const std::string& path);

/// What consolidate_checkpoint writes.
enum class WeightsFormat {
  Volt,         // a full volt checkpoint: everything the source holds
  Safetensors,  // the model's weights alone ("state_dict"), as a safetensors file (safetensors.h)
};

/// Turns the checkpoint at `src` (sharded folder, or full file) into a full checkpoint at `dst`,
/// or with WeightsFormat::Safetensors into a safetensors file of its model weights (names as in
/// the checkpoint's state_dict; metadata "format": "pt", the epoch, the step and the source).
/// Tensor by tensor: memory stays at about the largest tensor. Atomic: a failure leaves no file at
/// `dst` (nor changes one there). Returns the bytes written.
uint64_t consolidate_checkpoint(const std::string& src, const std::string& dst,
                                WeightsFormat format = WeightsFormat::Volt);

namespace detail {
/// The scalar fields of the pickled top-level dict (epoch, global_step, volt_meta, format_version).
std::vector<std::pair<std::string, c10::IValue>> checkpoint_fields(const CheckpointHeader& header);
/// The metadata stored in an archive's index: `meta` plus epoch and global_step.
YAML::Node checkpoint_index_meta(const CheckpointHeader& header);
}  // namespace detail

}  // namespace volt
