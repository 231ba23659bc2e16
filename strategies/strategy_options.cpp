#include "volt/strategies/strategy_options.h"

#include <algorithm>
#include <cctype>
#include <map>

namespace volt {

namespace {
// 30 days: longer is surely a typo, and the milliseconds c10d counts in would overflow far above.
constexpr int64_t kMaxTimeout = 30 * 24 * 3600;
std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}
}  // namespace

void DDPOptions::validate() const {
  VOLT_CHECK(bucket_cap_mb > 0, ConfigError, "config key 'trainer.strategy.bucket_cap_mb': must be > 0, got ",
             bucket_cap_mb);
  VOLT_CHECK(timeout > 0 && timeout <= kMaxTimeout, ConfigError,
             "config key 'trainer.strategy.timeout': must be in [1, ", kMaxTimeout, "] seconds, got ", timeout);
  VOLT_CHECK(process_group_backend.empty() || process_group_backend == "gloo" || process_group_backend == "nccl",
             ConfigError, "config key 'trainer.strategy.process_group_backend': unknown backend '",
             process_group_backend, "'; valid: gloo, nccl");
}

void FSDPOptions::validate() {
  sharding_strategy.validate("trainer.strategy.sharding_strategy");
  backward_prefetch.validate("trainer.strategy.backward_prefetch");
  state_dict_type.validate("trainer.strategy.state_dict_type");
  VOLT_CHECK(device_mesh.empty() || device_mesh.size() == 2, ConfigError,
             "config key 'trainer.strategy.device_mesh': expected [replicate_size, shard_size], got ",
             device_mesh.size(), " values");
  for (auto d : device_mesh)
    VOLT_CHECK(d >= 1, ConfigError, "config key 'trainer.strategy.device_mesh': sizes must be >= 1");
  VOLT_CHECK(timeout > 0 && timeout <= kMaxTimeout, ConfigError,
             "config key 'trainer.strategy.timeout': must be in [1, ", kMaxTimeout, "] seconds, got ", timeout);
  const ShardingStrategy s = sharding_strategy.value();
  VOLT_CHECK(device_mesh.empty() || s == ShardingStrategy::HybridShard || s == ShardingStrategy::HybridShardZero2,
             ConfigError,
             "config key 'trainer.strategy.device_mesh': only HYBRID_SHARD and _HYBRID_SHARD_ZERO2 use a "
             "device mesh, but sharding_strategy is ",
             sharding_strategy);
  auto_wrap_policy.validate("trainer.strategy.auto_wrap_policy", /*checkpointing=*/false);
  activation_checkpointing_policy.validate("trainer.strategy.activation_checkpointing_policy", true);
}

void ModulePolicy::validate(const std::string& key, bool checkpointing) const {
  VOLT_CHECK(min_num_params >= 0, ConfigError, "config key '", key, ".min_num_params': must be >= 0, got ",
             min_num_params);
  VOLT_CHECK(every_n_modules >= 1, ConfigError, "config key '", key, ".every_n_modules': must be >= 1, got ",
             every_n_modules);
  VOLT_CHECK(checkpointing || every_n_modules == 1, ConfigError, "config key '", key,
             ".every_n_modules': applies to activation_checkpointing_policy only (an FSDP unit is every module "
             "the wrap policy selects); remove it here");
  VOLT_CHECK(every_n_modules == 1 || !empty(), ConfigError, "config key '", key, ".every_n_modules': ", every_n_modules,
             " of no module: give module_types or min_num_params to select the modules");
}

std::string StrategyOptions::resolved(int64_t world_size) const {
  if (name == "auto") return world_size > 1 ? "ddp" : "single_device";
  if (name == "fsdp_cpu_offload") return "fsdp";
  return name;
}

void StrategyOptions::validate() {
  name = lower(name);
  if (name == "single" || name == "single_device") name = "single_device";
  static const std::vector<std::string> names = {"auto", "single_device", "ddp", "fsdp", "fsdp_cpu_offload"};
  VOLT_CHECK(std::find(names.begin(), names.end(), name) != names.end(), ConfigError,
             "config key 'trainer.strategy': unknown strategy '", name,
             "'; valid: auto, single_device, ddp, fsdp, fsdp_cpu_offload");
  if (name == "fsdp_cpu_offload") fsdp.cpu_offload = true;
  ddp.validate();
  fsdp.validate();
  activation_checkpointing_policy.validate("trainer.strategy.activation_checkpointing_policy", true);
}

namespace detail {

StrategyOptions YamlCodec<StrategyOptions>::decode(const YAML::Node& n, const std::string& key) {
  if (n.IsScalar()) return StrategyOptions(n.Scalar());
  if (!n.IsMap()) type_error(key, "a strategy name or a map with 'name'", n);
  StrategyOptions o;
  // LightningCLI form: {class_path: lightning.pytorch.strategies.FSDPStrategy, init_args: {...}}.
  // (A fresh handle for the body: assigning one yaml-cpp node to another rewrites the node the
  // first one shared, here the caller's strategy map.)
  const bool class_form = static_cast<bool>(n["class_path"]);
  const YAML::Node body = !class_form ? n : n["init_args"] ? n["init_args"] : YAML::Node(YAML::NodeType::Map);
  if (class_form) {
    std::string cp = n["class_path"].as<std::string>();
    std::string cls = cp.substr(cp.rfind('.') + 1);
    static const std::map<std::string, std::string> by_class = {
        {"FSDPStrategy", "fsdp"}, {"DDPStrategy", "ddp"}, {"SingleDeviceStrategy", "single_device"}};
    auto it = by_class.find(cls);
    VOLT_CHECK(it != by_class.end(), ConfigError, "config key '", key, ".class_path': unknown strategy class '", cp,
               "'; valid: FSDPStrategy, DDPStrategy, SingleDeviceStrategy");
    for (const auto& kv : n) {
      auto k = kv.first.as<std::string>();
      VOLT_CHECK(k == "class_path" || k == "init_args", ConfigError, "unknown config key '", key, ".", k, "'");
    }
    o.name = it->second;
  } else {
    VOLT_CHECK(n["name"], ConfigError, "config key '", key, "': a strategy map needs 'name' (ddp, fsdp, ...)");
    o.name = YamlCodec<std::string>::decode(n["name"], key + ".name");
  }
  YamlReader r(body, key);
  r.accept("name");
  std::string nm = lower(o.name);
  if (nm == "ddp") {
    o.ddp.visit(r);
  } else if (nm == "fsdp" || nm == "fsdp_cpu_offload") {
    o.fsdp.visit(r);
    VOLT_CHECK(nm != "fsdp_cpu_offload" || !body["cpu_offload"].IsDefined() || o.fsdp.cpu_offload, ConfigError,
               "config key '", key,
               ".cpu_offload': false contradicts the strategy's name fsdp_cpu_offload (which offloads); name it "
               "fsdp to train without offloading");
  } else {
    r("activation_checkpointing_policy", o.activation_checkpointing_policy);
  }
  if (nm == "ddp") r("activation_checkpointing_policy", o.activation_checkpointing_policy);
  r.finish();
  return o;
}

YAML::Node YamlCodec<StrategyOptions>::encode(const StrategyOptions& v) {
  StrategyOptions c = v;
  YAML::Node out(YAML::NodeType::Map);
  out["name"] = c.name;
  YamlWriter w;
  if (c.name == "ddp") {
    c.ddp.visit(w);
    w("activation_checkpointing_policy", c.activation_checkpointing_policy);
  } else if (c.name == "fsdp" || c.name == "fsdp_cpu_offload") {
    c.fsdp.visit(w);
  } else {
    w("activation_checkpointing_policy", c.activation_checkpointing_policy);
  }
  for (const auto& kv : w.node()) out[kv.first] = kv.second;
  return out;
}

}  // namespace detail
}  // namespace volt
