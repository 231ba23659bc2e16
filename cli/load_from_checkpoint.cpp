#include "volt/cli/load_from_checkpoint.h"

#include <torch/torch.h>

#include "volt/checkpoint/checkpoint_reader.h"
#include "volt/checkpoint/weights.h"
#include "volt/cli/class_section.h"
#include "volt/cli/cli.h"
#include "volt/cli/config_files.h"
#include "volt/core/errors.h"

namespace volt {

namespace detail {

namespace {
/// The last component of a class name: "volt::demos::LanguageModel" and "pkg.LanguageModel" give
/// "LanguageModel".
std::string last_component(const std::string& name) {
  const auto cut = name.find_last_of(".:");
  return cut == std::string::npos ? name : name.substr(cut + 1);
}

bool has_entries(const YAML::Node& n) { return n && n.IsMap() && n.size() > 0; }
}  // namespace

SavedModule read_saved_module(const std::string& path) {
  const CheckpointReader reader(path);
  const YAML::Node& meta = reader.meta();
  SavedModule s;
  s.path = path;
  if (meta["model_class"] && meta["model_class"].IsScalar()) s.cpp_class = meta["model_class"].Scalar();
  if (meta["config"] && meta["config"].IsMap() && meta["config"]["model"]) {
    const ClassSection section = parse_class_section(meta["config"]["model"], "model");
    s.class_path = section.class_path;
    s.init_args = YAML::Clone(section.init_args);
    s.source = "config";
    return s;
  }
  if (has_entries(meta["hyper_parameters"])) {
    s.init_args = YAML::Clone(meta["hyper_parameters"]);
    s.source = "hyper_parameters";
  }
  return s;
}

YAML::Node init_args_with_overrides(const SavedModule& saved, const YAML::Node& overrides, const YAML::Node& known,
                                    const std::string& class_name) {
  const bool takes_args = has_entries(known);
  const bool saved_args = saved.init_args.IsMap();
  VOLT_CHECK(saved_args || !takes_args, CheckpointError, "load_from_checkpoint: checkpoint '", saved.path,
             "' holds no hyper_parameters (the module's hparams() returned none) and no config written by the CLI, so ",
             class_name,
             " cannot be rebuilt from it. Return the init args from hparams() (e.g. options_to_yaml(options_)) in the "
             "runs that save checkpoints, or build the module yourself and load its weights with "
             "volt::load_weights(module, path)");
  YAML::Node args = saved_args ? YAML::Clone(saved.init_args) : YAML::Node(YAML::NodeType::Map);
  if (!overrides || overrides.IsNull()) return args;
  if (!overrides.IsMap()) type_error("load_from_checkpoint overrides", "a map of init args", overrides);
  for (const auto& kv : overrides) {
    const std::string key = kv.first.Scalar();
    if (known[key]) continue;
    std::string valid;
    for (const auto& k : known) valid += (valid.empty() ? "" : ", ") + k.first.Scalar();
    throw ConfigError(str_cat("load_from_checkpoint: unknown override '", key, "': ", class_name,
                              valid.empty() ? " takes no init args" : " takes " + valid));
  }
  merge_yaml(args, overrides);
  return args;
}

void check_saved_class(const SavedModule& saved, const std::string& cpp_class) {
  if (!saved.cpp_class.empty()) {
    VOLT_CHECK(saved.cpp_class == cpp_class, ConfigError, "load_from_checkpoint<", cpp_class, ">: checkpoint '",
               saved.path, "' was saved by a ", saved.cpp_class, ", not a ", cpp_class, "; load it as that class");
    return;
  }
  // An older checkpoint: the CLI's registered name, when there is one, is all it says.
  VOLT_CHECK(saved.class_path.empty() || last_component(saved.class_path) == last_component(cpp_class), ConfigError,
             "load_from_checkpoint<", cpp_class, ">: checkpoint '", saved.path, "' was saved by model class '",
             saved.class_path, "' (its config's model.class_path); load it as that class");
}

void load_saved_weights(LightningModule& module, const SavedModule& saved) {
  module.configure_model();
  try {
    load_weights(module, saved.path);
  } catch (const CheckpointError& e) {
    throw CheckpointError(str_cat("load_from_checkpoint: ", e.what(), " (the module was rebuilt from the checkpoint's ",
                                  saved.source.empty() ? "defaults" : saved.source,
                                  " and the overrides; an override that changes a shape does not fit the weights)"));
  }
  module.eval();
  module.to(torch::kCPU);
}

std::string module_class_name(const LightningModule& module) { return c10::demangle(typeid(module).name()); }

}  // namespace detail

std::shared_ptr<LightningModule> CLI::load_from_checkpoint(const std::string& path, const YAML::Node& overrides,
                                                           const std::string& class_name) const {
  VOLT_CHECK(registration_errors_.empty(), ConfigError, registration_errors_.front());
  const detail::SavedModule saved = detail::read_saved_module(path);
  const std::string name = class_name.empty() ? saved.class_path : class_name;
  VOLT_CHECK(!name.empty(), ConfigError, "load_from_checkpoint: checkpoint '", path,
             "' was not written by the CLI (it has no config naming the model class); name the class: ",
             "load_from_checkpoint(path, overrides, \"NAME\"); registered: ", models_.names());
  const auto* entry = models_.find(name);
  VOLT_CHECK(entry != nullptr, ConfigError, "load_from_checkpoint: unknown model class '", name,
             "'; registered: ", models_.names());
  VOLT_CHECK(saved.class_path.empty() || models_.find(saved.class_path) == entry, ConfigError,
             "load_from_checkpoint: checkpoint '", path, "' was saved by model class '", saved.class_path,
             "' (its config's model.class_path), not '", name, "'");
  const YAML::Node args = detail::init_args_with_overrides(saved, overrides, entry->defaults, entry->name);
  std::shared_ptr<LightningModule> model = entry->make(args, "model");
  const std::string built = detail::module_class_name(*model);
  VOLT_CHECK(saved.cpp_class.empty() || saved.cpp_class == built, ConfigError, "load_from_checkpoint: checkpoint '",
             path, "' was saved by a ", saved.cpp_class, ", but model class '", entry->name, "' builds a ", built);
  detail::load_saved_weights(*model, saved);
  return model;
}

}  // namespace volt
