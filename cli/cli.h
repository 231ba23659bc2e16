#pragma once
/// volt::CLI: LightningCLI for a program's own classes. The program registers its model, data
/// module and callback classes and gets the subcommands fit, validate, test and predict (and
/// consolidate), configured from YAML files and `--key=value` overrides:
///
///   int main(int argc, char** argv) {
///     volt::CLI cli;
///     cli.add_model<MyNet>("MyNet");         // MyNet(const MyNet::Options&); Options has visit()
///     cli.add_datamodule<MyData>("MyData");  // a LightningDataModule, same convention
///     cli.add_callback<MyCallback>("MyCallback");
///     return cli.main(argc, argv);           // 0 ok, 1 failure while running, 2 bad config/usage
///   }
///
/// Config, LightningCLI's layout:
///   seed_everything: 42
///   trainer: {max_steps: 100, callbacks: [{class_path: EarlyStopping, init_args: {patience: 3}}]}
///   model: {class_path: MyNet, init_args: {hidden: 64}}   # or `model: MyNet`, or flat
///   data: {class_path: MyData, init_args: {batch_size: 32}}  #   `model: {hidden: 64}` when MyNet
///   ckpt_path: last                                          #   is the only model class
/// Several --config files merge in order (maps key by key; naming another class drops the earlier
/// class's init_args), then the overrides apply (`--model.init_args.hidden=32`, or `--model.hidden=32`).
/// Unknown keys, unknown class names, wrong types and invalid values are ConfigErrors naming the key
/// (and the registered classes), raised before any work. `--print_config` prints the resolved config
/// (class_path and every init arg, defaults included), which is also saved beside the logs.
/// `--help` lists every key with its type and default, generated from the options' visit().
///
/// Built-in callbacks are registered: ModelCheckpoint, EarlyStopping, LearningRateMonitor,
/// ThroughputMonitor, DeviceStatsMonitor, Timer, ProgressBar, ModelSummary, PredictionWriter.
///
/// Ownership: the CLI owns its registries (no global state); the objects a run builds live for that
/// run. Thread-safety: register, then call main() or run() from one thread.
#include <yaml-cpp/yaml.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "volt/callbacks/callback.h"
#include "volt/cli/class_registry.h"
#include "volt/core/errors.h"
#include "volt/data/data_module.h"
#include "volt/module/lightning_module.h"

namespace volt {

namespace cli {

/// One invocation of fit / validate / test / predict: the subcommand and the config (merged files
/// and overrides, in any of the forms above), not yet resolved.
struct Command {
  std::string subcommand;
  YAML::Node config;
  bool print_config = false;
};

/// Loads config files, merged in order (maps key by key, later files win), and applies `--a.b=value`
/// overrides, without knowing about classes (CLI::load does that too). A key given twice in one
/// file, a folder or an unreadable file is a ConfigError naming the file.
YAML::Node load_configs(const std::vector<std::string>& paths, const std::vector<std::string>& overrides);
/// load_configs with one file ("" = none).
YAML::Node load_config(const std::string& path, const std::vector<std::string>& overrides);

}  // namespace cli

/// When a linked argument is set (LightningCLI's link_arguments apply_on).
enum class Link {
  /// From the resolved config, before anything is built (source: a `data.`, `trainer.`,
  /// `seed_everything` or `ckpt_path` key).
  OnParse,
  /// From the data module once it is built and set up: Trainer::prepare_data runs its
  /// prepare_data (global rank 0, the other ranks waiting, whatever started them) and
  /// setup(subcommand) before the model is built, and the run does not repeat them. The source
  /// `data.NAME` is the key NAME of its hparams(), or what a reader function returns (the typed
  /// link_arguments). The model's options are validated at parse time with the target as
  /// configured (let validate() accept a placeholder such as 0) and once more with the linked value.
  OnInstantiate,
};

/// What a link's compute function sees.
struct LinkValues {
  YAML::Node source;       ///< the source's value
  YAML::Node target;       ///< the target's value as configured (its default when not given)
  bool target_given;       ///< whether the config sets the target
  std::string target_key;  ///< for messages: "model.vocab_size" or "model.init_args.vocab_size"
};
/// Returns the target's value (throw ConfigError naming target_key to refuse a combination). Null
/// for a target the configured model does not have (`target` is null then) leaves it absent.
using LinkCompute = std::function<YAML::Node(const LinkValues&)>;

class CLI {
 public:
  /// A CLI with the built-in callbacks registered.
  CLI();
  ~CLI();
  CLI(const CLI&) = delete;
  CLI& operator=(const CLI&) = delete;

  // ---- models (LightningModule subclasses) ---------------------------------------------------
  /// A class with `using Options = ...;` (an options struct with visit(), optionally validate() or
  /// validate(prefix)) and a constructor from it; `defaults` are the config's defaults.
  template <class Model>
  CLI& add_model(const std::string& name, typename Model::Options defaults = {}) {
    return add_model<typename Model::Options>(
        name, [](const typename Model::Options& o) { return std::make_shared<Model>(o); }, std::move(defaults));
  }
  /// A class built by `factory(const Options&)` (any options struct with visit()).
  template <class Options, class Factory, std::enable_if_t<std::is_invocable_v<Factory&, const Options&>, int> = 0>
  CLI& add_model(const std::string& name, Factory factory, Options defaults = Options{}) {
    return record(models_.add(detail::make_entry<LightningModule>(name, std::move(defaults), std::move(factory))));
  }
  /// A class without init_args, built by `factory()`.
  template <class Factory, std::enable_if_t<std::is_invocable_v<Factory&>, int> = 0>
  CLI& add_model(const std::string& name, Factory factory) {
    return record(models_.add(detail::make_entry<LightningModule>(name, std::move(factory))));
  }

  // ---- data modules (LightningDataModule subclasses), the same three forms ------------------
  template <class DataModule>
  CLI& add_datamodule(const std::string& name, typename DataModule::Options defaults = {}) {
    return add_datamodule<typename DataModule::Options>(
        name, [](const typename DataModule::Options& o) { return std::make_shared<DataModule>(o); },
        std::move(defaults));
  }
  template <class Options, class Factory, std::enable_if_t<std::is_invocable_v<Factory&, const Options&>, int> = 0>
  CLI& add_datamodule(const std::string& name, Factory factory, Options defaults = Options{}) {
    return record(
        datamodules_.add(detail::make_entry<LightningDataModule>(name, std::move(defaults), std::move(factory))));
  }
  template <class Factory, std::enable_if_t<std::is_invocable_v<Factory&>, int> = 0>
  CLI& add_datamodule(const std::string& name, Factory factory) {
    return record(datamodules_.add(detail::make_entry<LightningDataModule>(name, std::move(factory))));
  }

  // ---- callbacks (items of trainer.callbacks), the same three forms --------------------------
  template <class CallbackType>
  CLI& add_callback(const std::string& name, typename CallbackType::Options defaults = {}) {
    return add_callback<typename CallbackType::Options>(
        name, [](const typename CallbackType::Options& o) { return std::make_shared<CallbackType>(o); },
        std::move(defaults));
  }
  template <class Options, class Factory, std::enable_if_t<std::is_invocable_v<Factory&, const Options&>, int> = 0>
  CLI& add_callback(const std::string& name, Factory factory, Options defaults = Options{}) {
    return record(callbacks_.add(detail::make_entry<Callback>(name, std::move(defaults), std::move(factory))));
  }
  template <class Factory, std::enable_if_t<std::is_invocable_v<Factory&>, int> = 0>
  CLI& add_callback(const std::string& name, Factory factory) {
    return record(callbacks_.add(detail::make_entry<Callback>(name, std::move(factory))));
  }

  /// Sets the model's init arg `target` ("model.NAME" or "model.init_args.NAME") from `source`, as
  /// LightningCLI's link_arguments: e.g. link_arguments("data.vocab_size", "model.vocab_size",
  /// Link::OnInstantiate). Without `compute` the target takes the source's value and may not be set
  /// in the config; with it, `compute` decides. A malformed link is reported by main() (exit 2).
  CLI& link_arguments(const std::string& source, const std::string& target, Link apply_on = Link::OnParse,
                      LinkCompute compute = nullptr);
  /// Link::OnInstantiate with the source read by `read(const DataModule&)` (a value YAML::Node can
  /// hold) from the data module after its setup, e.g.
  ///   cli.link_arguments<MyData>("data.vocab_size", [](const MyData& d) { return d.vocab_size(); },
  ///                              "model.vocab_size");
  /// `source` names it in messages and --help. The link applies only when the configured data
  /// module is a DataModule (each data class of a program can link its own value).
  template <class DataModule, class Read>
  CLI& link_arguments(const std::string& source, Read read, const std::string& target, LinkCompute compute = nullptr) {
    return add_link(source, target, Link::OnInstantiate, std::move(compute),
                    [read](LightningDataModule& dm) -> std::optional<YAML::Node> {
                      const auto* d = dynamic_cast<const DataModule*>(&dm);
                      if (d == nullptr) return std::nullopt;
                      return YAML::Node(read(*d));
                    });
  }

  /// The model / data module class of a config section without class_path when several are
  /// registered (with one, it is that one).
  CLI& set_default_model(const std::string& name);
  CLI& set_default_datamodule(const std::string& name);

  /// A subcommand of the program's own: `program NAME ...` calls `run(argc, argv)` (its words
  /// start at argv[2]; cli/args.h splits them), listed in --help with `summary`; `NAME --help`
  /// prints `usage`. A ConfigError it throws exits 2 with its message, any other error 1.
  CLI& add_subcommand(const std::string& name, const std::string& summary, const std::string& usage,
                      std::function<int(int, char**)> run);

  /// Runs the command line; returns the exit code: 0 success (and help), 1 a failure while running,
  /// 2 a bad config or usage. Errors are printed to stderr. Never calls exit().
  int main(int argc, char** argv);
  /// Runs one subcommand; throws (ConfigError for a bad config) instead of returning 2 or 1.
  int run(const cli::Command& command);

  /// Config files merged in order and overrides applied, class sections kept in the forms given.
  YAML::Node load(const std::vector<std::string>& config_files, const std::vector<std::string>& overrides) const;
  /// The resolved config --print_config prints (every key, classes as {class_path, init_args}).
  YAML::Node resolve(const YAML::Node& config) const;
  /// `--help` text: "" for the program, else a subcommand's (every key with type and default).
  std::string help(const std::string& subcommand = "") const;

  /// Lightning's `Model.load_from_checkpoint(path, **overrides)` through the registered model
  /// classes (cli/load_from_checkpoint.h): the class the checkpoint's saved config names in
  /// model.class_path (or `class_name`, a registered name, for a checkpoint without that config;
  /// one that names another class is a ConfigError), built from the saved init args with
  /// `overrides` (a map of init args) winning, then configure_model() and the weights; returned in
  /// eval mode on the CPU. Errors as load_from_checkpoint<Model>'s.
  std::shared_ptr<LightningModule> load_from_checkpoint(const std::string& path,
                                                        const YAML::Node& overrides = YAML::Node(),
                                                        const std::string& class_name = "") const;

 private:
  /// The class a model / data section without class_path means: the default, or the only one.
  std::string implied_class(const std::string& section) const;
  struct Resolved;
  struct LinkSpec {
    std::string source, target_arg;  // target_arg: the init arg's dotted name inside model init_args
    Link apply_on;
    LinkCompute compute;
    // OnInstantiate; nullptr: from hparams(); nullopt: not for this data module class
    std::function<std::optional<YAML::Node>(LightningDataModule&)> read;
  };
  struct Subcommand {
    std::string name, summary, usage;
    std::function<int(int, char**)> run;
  };
  CLI& record(const std::string& error);
  CLI& add_link(const std::string& source, const std::string& target, Link apply_on, LinkCompute compute,
                std::function<std::optional<YAML::Node>(LightningDataModule&)> read);
  Resolved resolve_config(const YAML::Node& config) const;
  std::string usage() const;

  detail::ClassRegistry<LightningModule> models_{"model"};
  detail::ClassRegistry<LightningDataModule> datamodules_{"data module"};
  detail::ClassRegistry<Callback> callbacks_{"callback"};
  std::vector<LinkSpec> links_;
  std::vector<Subcommand> subcommands_;
  std::vector<std::string> registration_errors_;
  std::string program_ = "volt";
};

}  // namespace volt
