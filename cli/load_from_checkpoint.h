#pragma once
/// load_from_checkpoint: a trained LightningModule back from its checkpoint, as Lightning's
/// `Model.load_from_checkpoint(path, **overrides)`. The module is built from the init args the
/// checkpoint saved, configure_model() runs, its weights are loaded (volt::load_weights, strict;
/// a full file or a sharded folder) and it is returned in eval mode on the CPU.
///
///   auto model = volt::load_from_checkpoint<MyNet>("runs/x/checkpoints/last.ckpt");
///   auto tuned = volt::load_from_checkpoint<MyNet>(path, YAML::Load("{dropout: 0.0}"));
///   std::shared_ptr<volt::LightningModule> any = cli.load_from_checkpoint(path);  // by registered name
///
/// The saved init args are the saved config's `model.init_args` when the CLI wrote the checkpoint,
/// else its `hyper_parameters` (what the module's hparams() returned: its options as YAML, e.g.
/// `options_to_yaml(options_)`). `overrides`, a map of init args, win over them key by key.
///
/// The typed form builds `Model(const Options&)` (Options: Model::Options unless given) and refuses
/// with a ConfigError a checkpoint whose module was another class (the checkpoint's `model_class`,
/// or for older checkpoints the last component of the config's class_path). CLI::load_from_checkpoint
/// builds the class the config's `model.class_path` names through the CLI's registry (or the
/// registered class it is given by name).
///
/// Errors: CheckpointError for an unreadable or foreign file (naming it), a checkpoint without
/// saved init args, or weights that do not fit the rebuilt module (overrides that change its
/// shapes); ConfigError for another class, an override key the class does not take (naming it) or
/// an invalid value. Thread-safety: reads files only; the module returned is the caller's.
#include <c10/util/Type.h>
#include <yaml-cpp/yaml.h>

#include <memory>
#include <string>
#include <type_traits>
#include <typeinfo>

#include "volt/cli/class_registry.h"
#include "volt/core/options.h"
#include "volt/module/lightning_module.h"

namespace volt {

namespace detail {

/// What a checkpoint records about the module that wrote it.
struct SavedModule {
  std::string path;
  std::string class_path;  ///< the CLI's registered name (config model.class_path); "" without a CLI config
  std::string cpp_class;   ///< the module's C++ class (meta model_class); "" in older checkpoints
  YAML::Node init_args;    ///< a map; null when the checkpoint saved none
  std::string source;      ///< where init_args came from: "config" or "hyper_parameters"
};

/// Reads the metadata of the checkpoint at `path` (CheckpointError naming the file if it is not a
/// volt checkpoint).
SavedModule read_saved_module(const std::string& path);
/// The saved init args with `overrides` (a map, or null) merged over them key by key. A ConfigError
/// names an override key that is not a key of `known` (the class's init args with their defaults);
/// a CheckpointError says that the checkpoint saved no init args when `known` has any.
YAML::Node init_args_with_overrides(const SavedModule& saved, const YAML::Node& overrides, const YAML::Node& known,
                                    const std::string& class_name);
/// ConfigError unless the checkpoint's module was of the C++ class `cpp_class`.
void check_saved_class(const SavedModule& saved, const std::string& cpp_class);
/// configure_model(), the checkpoint's weights (strict), eval mode, the CPU.
void load_saved_weights(LightningModule& module, const SavedModule& saved);
/// The C++ class of `module` as checkpoints record it.
std::string module_class_name(const LightningModule& module);

}  // namespace detail

/// `Model` rebuilt from the checkpoint at `path` (a full file or a sharded folder) with its saved
/// init args, `overrides` winning, and its weights loaded; in eval mode on the CPU.
template <class Model, class Options = typename Model::Options>
std::shared_ptr<Model> load_from_checkpoint(const std::string& path, const YAML::Node& overrides = YAML::Node()) {
  static_assert(std::is_base_of_v<LightningModule, Model>, "load_from_checkpoint<Model>: Model is a LightningModule");
  const detail::SavedModule saved = detail::read_saved_module(path);
  const std::string cpp_class = c10::demangle(typeid(Model).name());
  detail::check_saved_class(saved, cpp_class);
  const Options defaults{};
  const YAML::Node args = detail::init_args_with_overrides(saved, overrides, options_to_yaml(defaults), cpp_class);
  auto model = std::make_shared<Model>(detail::read_options(defaults, args, "model"));
  detail::load_saved_weights(*model, saved);
  return model;
}

}  // namespace volt
