#pragma once
/// Options of the built-in strategies, with Lightning's names and defaults. YAML:
///   strategy: fsdp                        # a name alone
///   strategy: {name: fsdp, sharding_strategy: SHARD_GRAD_OP, auto_wrap_policy: [TransformerEncoderLayer]}
/// Only the chosen strategy's keys are accepted next to `name`.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "volt/core/options.h"
#include "volt/module/optimizer_config.h"  // GradientClipAlgorithm

namespace torch::nn {
class Module;
}

namespace volt {

/// PyTorch DDP's options (strategies/ddp.h has what each does).
struct DDPOptions {
  double bucket_cap_mb = 25.0;
  /// .grad of every parameter is a view into its gradient bucket (no second copy of the gradients).
  bool gradient_as_bucket_view = false;
  /// The parameters that get a gradient are the same every step (learned on the first step).
  bool static_graph = false;
  /// Allow parameters that get no gradient on some or all ranks (otherwise an error).
  bool find_unused_parameters = false;
  int64_t timeout = 1800;             // seconds, as Lightning's default 30 min
  std::string process_group_backend;  // "" = gloo on the CPU, nccl on CUDA

  template <class V>
  void visit(V& v) {
    v("bucket_cap_mb", bucket_cap_mb)("gradient_as_bucket_view", gradient_as_bucket_view)("static_graph", static_graph)(
        "find_unused_parameters", find_unused_parameters)("timeout", timeout)("process_group_backend",
                                                                              process_group_backend);
  }
  void validate() const;
};

/// Which modules become FSDP units (or get activation checkpointing). A set of module type names
/// (as the module's name() reports them, e.g. "TransformerEncoderLayer"), a size threshold, or a
/// predicate (C++ only). Empty = no policy.
struct ModulePolicy {
  std::vector<std::string> module_types;
  int64_t min_num_params = 0;
  /// (module, qualified name) -> selected. Not expressible in YAML.
  std::function<bool(const torch::nn::Module&, const std::string&)> predicate;
  /// Activation checkpointing only: of the modules the policy selects, in the model's order, only
  /// the n-th, 2n-th, ... are checkpointed (torchtitan's selective_ac_option "n"): a dial between
  /// memory (fewer activations kept) and speed (less recomputed). 1: every selected module.
  int64_t every_n_modules = 1;

  bool empty() const { return module_types.empty() && min_num_params <= 0 && !predicate; }
  template <class V>
  void visit(V& v) {
    v("module_types", module_types)("min_num_params", min_num_params)("every_n_modules", every_n_modules);
  }
  /// Checks the values (min_num_params >= 0, every_n_modules >= 1, and every_n_modules left at 1
  /// unless `checkpointing`); throws ConfigError naming `<key>.<field>`.
  void validate(const std::string& key, bool checkpointing) const;
};

/// FSDP's sharding strategies (PyTorch's names): FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD,
/// _HYBRID_SHARD_ZERO2.
enum class ShardingStrategy { FullShard, ShardGradOp, NoShard, HybridShard, HybridShardZero2 };
/// When FSDP gathers the next unit in backward: BACKWARD_PRE, BACKWARD_POST, NONE.
enum class BackwardPrefetch { BackwardPre, BackwardPost, None };
/// What an FSDP checkpoint holds: "full" (one file, gathered) or "sharded" (a folder, per rank).
enum class StateDictType { Full, Sharded };

template <>
struct ChoiceNames<ShardingStrategy> {
  static const std::vector<std::pair<ShardingStrategy, const char*>>& names() {
    static const std::vector<std::pair<ShardingStrategy, const char*>> n = {
        {ShardingStrategy::FullShard, "FULL_SHARD"},
        {ShardingStrategy::ShardGradOp, "SHARD_GRAD_OP"},
        {ShardingStrategy::NoShard, "NO_SHARD"},
        {ShardingStrategy::HybridShard, "HYBRID_SHARD"},
        {ShardingStrategy::HybridShardZero2, "_HYBRID_SHARD_ZERO2"}};
    return n;
  }
  static std::string normalize(const std::string& s) { return detail::to_upper(s); }
};
template <>
struct ChoiceNames<BackwardPrefetch> {
  static const std::vector<std::pair<BackwardPrefetch, const char*>>& names() {
    static const std::vector<std::pair<BackwardPrefetch, const char*>> n = {
        {BackwardPrefetch::BackwardPre, "BACKWARD_PRE"},
        {BackwardPrefetch::BackwardPost, "BACKWARD_POST"},
        {BackwardPrefetch::None, "NONE"}};
    return n;
  }
  static std::string normalize(const std::string& s) { return s.empty() ? "NONE" : detail::to_upper(s); }
};
template <>
struct ChoiceNames<StateDictType> {
  static const std::vector<std::pair<StateDictType, const char*>>& names() {
    static const std::vector<std::pair<StateDictType, const char*>> n = {{StateDictType::Full, "full"},
                                                                         {StateDictType::Sharded, "sharded"}};
    return n;
  }
  static std::string normalize(const std::string& s) { return detail::to_lower(s); }
};

struct FSDPOptions {
  Choice<ShardingStrategy> sharding_strategy = ShardingStrategy::FullShard;
  ModulePolicy auto_wrap_policy;
  ModulePolicy activation_checkpointing_policy;
  bool cpu_offload = false;
  std::optional<std::string> param_dtype;
  std::optional<std::string> reduce_dtype;
  std::optional<std::string> buffer_dtype;
  Choice<StateDictType> state_dict_type = StateDictType::Full;
  std::vector<int64_t> device_mesh;  // (replicate, shard) for HYBRID_SHARD
  bool limit_all_gathers = true;
  Choice<BackwardPrefetch> backward_prefetch = BackwardPrefetch::BackwardPre;
  bool forward_prefetch = false;
  /// true: rank 0's parameters and buffers are broadcast to every rank before sharding. false: no
  /// broadcast; the ranks must already hold the same values (checked, ConfigError otherwise).
  bool sync_module_states = false;
  /// Step each unit's shard inside backward, as soon as its reduced gradient is ready (PyTorch's
  /// optimizer_in_backward; with cpu_offload the host steps overlap the GPU's backward, as in
  /// ZeRO-Offload). Gives the same parameters as stepping after backward; refused where it could
  /// not (docs/fsdp.md).
  bool optimizer_in_backward = false;
  int64_t timeout = 1800;
  std::string process_group_backend;

  template <class V>
  void visit(V& v) {
    v("sharding_strategy", sharding_strategy)("auto_wrap_policy", auto_wrap_policy)(
        "activation_checkpointing_policy", activation_checkpointing_policy)("cpu_offload", cpu_offload)(
        "param_dtype", param_dtype)("reduce_dtype", reduce_dtype)("buffer_dtype", buffer_dtype)(
        "state_dict_type", state_dict_type)("device_mesh", device_mesh)("limit_all_gathers", limit_all_gathers)(
        "backward_prefetch", backward_prefetch)("forward_prefetch", forward_prefetch)(
        "sync_module_states", sync_module_states)("optimizer_in_backward", optimizer_in_backward)("timeout", timeout)(
        "process_group_backend", process_group_backend);
  }
  /// Normalizes case ("full_shard" -> "FULL_SHARD") and checks every value; throws ConfigError.
  void validate();
};

/// Which strategy to use and its options. Assign a name for the one-line switch:
///   options.strategy = "fsdp";
struct StrategyOptions {
  std::string name = "auto";
  DDPOptions ddp;
  FSDPOptions fsdp;
  /// Activation checkpointing for the non-FSDP strategies (single device, DDP).
  ModulePolicy activation_checkpointing_policy;

  StrategyOptions() = default;
  StrategyOptions(const char* n) : name(n) {}             // NOLINT: implicit on purpose
  StrategyOptions(std::string n) : name(std::move(n)) {}  // NOLINT
  /// The canonical name: "single_device", "ddp", "fsdp" ("auto" resolves by devices).
  std::string resolved(int64_t world_size) const;
  void validate();
};

namespace detail {
template <>
struct YamlCodec<StrategyOptions> {
  static StrategyOptions decode(const YAML::Node& n, const std::string& key);
  static YAML::Node encode(const StrategyOptions& v);
};
}  // namespace detail

}  // namespace volt
