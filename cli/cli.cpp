#include "volt/cli/cli.h"

#include <c10/util/Exception.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <filesystem>
#include <iostream>
#include <optional>

#include "volt/callbacks/backbone_finetuning.h"
#include "volt/callbacks/device_stats_monitor.h"
#include "volt/callbacks/early_stopping.h"
#include "volt/callbacks/ema_weight_averaging.h"
#include "volt/callbacks/gradient_accumulation_scheduler.h"
#include "volt/callbacks/lr_finder.h"
#include "volt/callbacks/lr_monitor.h"
#include "volt/callbacks/model_checkpoint.h"
#include "volt/callbacks/model_summary.h"
#include "volt/callbacks/on_exception_checkpoint.h"
#include "volt/callbacks/prediction_writer.h"
#include "volt/callbacks/progress_bar.h"
#include "volt/callbacks/stochastic_weight_averaging.h"
#include "volt/callbacks/throughput_monitor.h"
#include "volt/callbacks/timer.h"
#include "volt/callbacks/weight_averaging.h"
#include "volt/cli/args.h"
#include "volt/cli/class_section.h"
#include "volt/cli/cli_help.h"
#include "volt/cli/config_files.h"
#include "volt/cli/consolidate.h"
#include "volt/cli/launch_flags.h"
#include "volt/core/errors.h"
#include "volt/core/files.h"
#include "volt/core/options.h"
#include "volt/distributed/elastic_agent.h"
#include "volt/trainer/trainer.h"

namespace volt {

namespace detail {

void check_no_init_args(const std::string& class_name, const YAML::Node& init_args, const std::string& prefix) {
  if (!init_args || init_args.IsNull()) return;
  if (!init_args.IsMap()) type_error(prefix, "a map", init_args);
  for (const auto& kv : init_args)
    throw ConfigError(
        str_cat("unknown config key '", join_key(prefix, kv.first.Scalar()), "'; ", class_name, " takes no init_args"));
}

}  // namespace detail

namespace {

constexpr const char* kSections[] = {"trainer", "model", "data", "ckpt_path", "seed_everything"};

/// The value at `dotted` inside `node`, if there is one.
std::optional<YAML::Node> find_path(const YAML::Node& node, const std::string& dotted) {
  const auto dot = dotted.find('.');
  const std::string head = dotted.substr(0, dot);
  if (!node.IsMap() || !node[head]) return std::nullopt;
  const YAML::Node child = node[head];
  if (dot == std::string::npos) return child;
  return find_path(child, dotted.substr(dot + 1));
}

/// Sets `dotted` inside the map `node` (creating maps on the way).
void set_path(YAML::Node node, const std::string& dotted, const YAML::Node& value) {
  const auto dot = dotted.find('.');
  if (dot == std::string::npos) {
    node[dotted] = YAML::Clone(value);
    return;
  }
  const std::string head = dotted.substr(0, dot);
  if (!node[head] || !node[head].IsMap()) node[head] = YAML::Node(YAML::NodeType::Map);
  set_path(node[head], dotted.substr(dot + 1), value);
}

/// `prefix.` removed from the front of `key` ("" if it is not there).
std::string strip(const std::string& key, const std::string& prefix) {
  return key.rfind(prefix + ".", 0) == 0 ? key.substr(prefix.size() + 1) : "";
}

/// The class a section names: its class_path, or the only registered class.
template <class Base>
const detail::ClassEntry<Base>* choose(const detail::ClassRegistry<Base>& registry, const detail::ClassSection& s,
                                       const std::string& key, const char* adder) {
  if (s.class_path.empty()) {
    const auto& entries = registry.entries();
    VOLT_CHECK(!entries.empty(), ConfigError, "config key '", key, "': no ", registry.kind(),
               " class is registered (the program registers them with CLI::", adder, ")");
    if (entries.size() > 1 && !registry.default_name.empty()) return registry.find(registry.default_name);
    VOLT_CHECK(entries.size() == 1, ConfigError, "config key '", key, "': several ", registry.kind(),
               " classes are registered (", registry.names(), "); choose one with ", key, ".class_path (or --", key,
               "=NAME)");
    return &entries.front();
  }
  const auto* e = registry.find(s.class_path);
  VOLT_CHECK(e != nullptr, ConfigError, "config key '", key, ".class_path': unknown ", registry.kind(), " class '",
             s.class_path, "'; registered: ", registry.names());
  return e;
}

YAML::Node class_yaml(const std::string& name, const YAML::Node& init_args) {
  YAML::Node n(YAML::NodeType::Map);
  n["class_path"] = name;
  n["init_args"] = YAML::Clone(init_args);
  return n;
}

/// The target's value from a link without a compute function: the source's; the config may not
/// set it too.
YAML::Node take_source(const LinkValues& v, const std::string& source) {
  VOLT_CHECK(!v.target_given, ConfigError, "config key '", v.target_key, "' is set from '", source,
             "' (a linked argument); remove it from the config");
  return v.source;
}

}  // namespace

struct CLI::Resolved {
  struct Item {
    const detail::ClassEntry<Callback>* entry;
    YAML::Node args;
    std::string prefix;
  };
  YAML::Node yaml;  // what --print_config prints and the logs keep
  TrainerOptions trainer;
  std::vector<Item> callbacks;
  const detail::ClassEntry<LightningModule>* model = nullptr;
  YAML::Node model_args, model_given;  // resolved; as the config gave them
  std::string model_prefix;
  const detail::ClassEntry<LightningDataModule>* data = nullptr;
  YAML::Node data_args;
  std::string data_prefix;
  std::string ckpt_path;
};

CLI::CLI() {
  add_callback<ModelCheckpointOptions>(
      "ModelCheckpoint", [](const ModelCheckpointOptions& o) { return std::make_shared<ModelCheckpoint>(o); });
  add_callback<EarlyStoppingOptions>("EarlyStopping",
                                     [](const EarlyStoppingOptions& o) { return std::make_shared<EarlyStopping>(o); });
  add_callback<LearningRateMonitorOptions>("LearningRateMonitor", [](const LearningRateMonitorOptions& o) {
    return std::make_shared<LearningRateMonitor>(o);
  });
  add_callback<ThroughputMonitorOptions>(
      "ThroughputMonitor", [](const ThroughputMonitorOptions& o) { return std::make_shared<ThroughputMonitor>(o); });
  add_callback<DeviceStatsMonitorOptions>(
      "DeviceStatsMonitor", [](const DeviceStatsMonitorOptions& o) { return std::make_shared<DeviceStatsMonitor>(o); });
  add_callback<TimerOptions>("Timer", [](const TimerOptions& o) { return std::make_shared<Timer>(o); });
  add_callback<ProgressBarOptions>(
      "ProgressBar", [](const ProgressBarOptions& o) { return std::make_shared<ProgressBar>(o.refresh_rate); });
  add_callback<ModelSummaryOptions>(
      "ModelSummary", [](const ModelSummaryOptions& o) { return std::make_shared<ModelSummary>(o.max_depth); });
  add_callback<PredictionWriterOptions>(
      "PredictionWriter", [](const PredictionWriterOptions& o) { return std::make_shared<PredictionWriter>(o); });
  add_callback<GradientAccumulationScheduler>("GradientAccumulationScheduler");
  add_callback<BackboneFinetuning>("BackboneFinetuning");
  add_callback<LearningRateFinder>("LearningRateFinder");
  add_callback<OnExceptionCheckpoint>("OnExceptionCheckpoint");
  add_callback<WeightAveraging>("WeightAveraging");
  add_callback<EMAWeightAveraging>("EMAWeightAveraging");
  add_callback<StochasticWeightAveraging>("StochasticWeightAveraging");
}

CLI::~CLI() = default;

CLI& CLI::record(const std::string& error) {
  if (!error.empty()) registration_errors_.push_back(error);
  return *this;
}

CLI& CLI::set_default_model(const std::string& name) {
  if (!models_.find(name))
    return record("set_default_model('" + name + "'): no model class of that name is registered");
  models_.default_name = name;
  return *this;
}

CLI& CLI::set_default_datamodule(const std::string& name) {
  if (!datamodules_.find(name))
    return record("set_default_datamodule('" + name + "'): no data module class of that name is registered");
  datamodules_.default_name = name;
  return *this;
}

CLI& CLI::add_subcommand(const std::string& name, const std::string& summary, const std::string& usage,
                         std::function<int(int, char**)> run) {
  if (name.empty() || name == "consolidate" || name == "help" || detail::is_run_subcommand(name))
    return record("add_subcommand('" + name + "'): the name is empty or taken by a built-in subcommand");
  for (const auto& c : subcommands_)
    if (c.name == name) return record("add_subcommand('" + name + "'): registered twice");
  subcommands_.push_back({name, summary, usage, std::move(run)});
  return *this;
}

CLI& CLI::link_arguments(const std::string& source, const std::string& target, Link apply_on, LinkCompute compute) {
  return add_link(source, target, apply_on, std::move(compute), nullptr);
}

CLI& CLI::add_link(const std::string& source, const std::string& target, Link apply_on, LinkCompute compute,
                   std::function<std::optional<YAML::Node>(LightningDataModule&)> read) {
  std::string arg = strip(target, "model");
  if (!strip(arg, "init_args").empty()) arg = strip(arg, "init_args");
  if (arg.empty())
    return record("link_arguments('" + source + "', '" + target +
                  "'): the target must be a model init arg (model.NAME)");
  std::string src = source;
  if (!strip(src, "data.init_args").empty()) src = "data." + strip(src, "data.init_args");
  const bool ok = apply_on == Link::OnInstantiate ? !strip(src, "data").empty()
                                                  : (!strip(src, "data").empty() || !strip(src, "trainer").empty() ||
                                                     src == "seed_everything" || src == "ckpt_path");
  if (!ok)
    return record("link_arguments('" + source + "', '" + target + "'): the source must be " +
                  (apply_on == Link::OnInstantiate ? "data.NAME (a key of the data module's hparams())"
                                                   : "a data., trainer., seed_everything or ckpt_path key"));
  if (!compute) compute = [source](const LinkValues& v) { return take_source(v, source); };
  links_.push_back({src, arg, apply_on, std::move(compute), std::move(read)});
  return *this;
}

std::string CLI::implied_class(const std::string& section) const {
  auto implied = [](const auto& registry) -> std::string {
    if (!registry.default_name.empty()) return registry.default_name;
    return registry.entries().size() == 1 ? registry.entries().front().name : std::string();
  };
  return section == "model" ? implied(models_) : implied(datamodules_);
}

YAML::Node CLI::load(const std::vector<std::string>& config_files, const std::vector<std::string>& overrides) const {
  YAML::Node root(YAML::NodeType::Map);
  for (const auto& path : config_files) {
    const YAML::Node file = detail::read_config_file(path);
    if (file.IsNull()) continue;
    for (const auto& kv : file) {
      const std::string key = kv.first.Scalar();
      if (key == "model" || key == "data") {
        detail::merge_class_section(root, key, kv.second, implied_class(key));
      } else {
        YAML::Node one(YAML::NodeType::Map);
        one[key] = kv.second;
        detail::merge_yaml(root, one);
      }
    }
  }
  for (const auto& o : overrides) {
    const auto eq = o.find('=');
    const std::string key = o.substr(0, eq), value = eq == std::string::npos ? "" : o.substr(eq + 1);
    const std::string head = key.substr(0, key.find('.'));
    detail::check_section_override(key, value);
    if (head == "model" || head == "data")
      detail::override_class_section(root, head, key.size() > head.size() ? key.substr(head.size() + 1) : "", value,
                                     implied_class(head));
    else
      apply_override(root, key, value);
  }
  return root;
}

CLI::Resolved CLI::resolve_config(const YAML::Node& config) const {
  VOLT_CHECK(registration_errors_.empty(), ConfigError, registration_errors_.front());
  Resolved r;
  const YAML::Node top = config && !config.IsNull() ? config : YAML::Node(YAML::NodeType::Map);
  VOLT_CHECK(top.IsMap(), ConfigError, "the config must be a map of sections (trainer, model, data, ckpt_path, ",
             "seed_everything), got ", detail::describe(top));
  for (const auto& kv : top) {
    const std::string key = kv.first.Scalar();
    bool known = false;
    for (const char* s : kSections) known = known || key == s;
    VOLT_CHECK(known, ConfigError, "unknown config key '", key,
               "'; valid keys here: ckpt_path, data, model, seed_everything, trainer");
  }

  // trainer: TrainerOptions, and the callbacks list beside them.
  YAML::Node trainer = top["trainer"] ? YAML::Clone(top["trainer"]) : YAML::Node();
  YAML::Node callbacks;
  if (trainer.IsMap() && static_cast<const YAML::Node&>(trainer)["callbacks"]) {
    callbacks = YAML::Clone(static_cast<const YAML::Node&>(trainer)["callbacks"]);
    trainer.remove("callbacks");
  }
  try {
    r.trainer = options_from_yaml<TrainerOptions>(trainer, "trainer");
  } catch (const ConfigError& e) {
    // TrainerOptions lists its own keys; callbacks is read here, beside them.
    const std::string m = e.what();
    const std::string head = "unknown config key 'trainer.";
    const size_t end = m.find('\'', head.size());
    const bool top_level = m.rfind(head, 0) == 0 && end != std::string::npos &&
                           m.substr(head.size(), end - head.size()).find_first_of(".[") == std::string::npos;
    if (!top_level || m.find("valid keys here") == std::string::npos) throw;
    throw ConfigError(m + "; and callbacks (a list of {class_path, init_args})");
  }
  const std::optional<int64_t> seed = top["seed_everything"] ? detail::YamlCodec<std::optional<int64_t>>::decode(
                                                                   top["seed_everything"], "seed_everything")
                                                             : std::nullopt;
  VOLT_CHECK(!seed || (*seed >= 0 && *seed <= TrainerOptions::kMaxSeed), ConfigError,
             "config key 'seed_everything': ", seed.value_or(0), " is out of range; a seed is from 0 to ",
             TrainerOptions::kMaxSeed, " (as Lightning's seed_everything), or null for none");
  // Both name one seed; a saved config.yaml holds both. seed_everything (Lightning's name) wins, so
  // that `--seed_everything=N` reruns a saved config with another seed.
  if (seed && r.trainer.seed && *seed != *r.trainer.seed)
    spdlog::warn("seed_everything ({}) replaces trainer.seed ({}): they name the same seed", *seed, *r.trainer.seed);
  if (seed) r.trainer.seed = seed;
  r.trainer.validate();
  if (top["ckpt_path"])
    r.ckpt_path = detail::YamlCodec<std::optional<std::string>>::decode(top["ckpt_path"], "ckpt_path").value_or("");
  // A mistyped path fails here, before a logger makes its version folder.
  VOLT_CHECK(r.ckpt_path.empty() || r.ckpt_path == "last" || r.ckpt_path == "best" || detail::path_exists(r.ckpt_path),
             ConfigError, "config key 'ckpt_path': '", r.ckpt_path,
             "' does not exist (a checkpoint file or sharded folder, or 'last' or 'best')");

  YAML::Node callbacks_yaml(YAML::NodeType::Sequence);
  if (callbacks && !callbacks.IsNull()) {
    if (!callbacks.IsSequence())
      detail::type_error("trainer.callbacks", "a list of {class_path: NAME, init_args: {...}}", callbacks);
    for (size_t i = 0; i < callbacks.size(); ++i) {
      const std::string key = "trainer.callbacks[" + std::to_string(i) + "]";
      const auto s = detail::parse_class_section(callbacks[i], key);
      VOLT_CHECK(!s.class_path.empty(), ConfigError, "config key '", key,
                 "': a callback needs class_path; registered: ", callbacks_.names());
      const auto* e = choose(callbacks_, s, key, "add_callback");
      const std::string prefix = s.args_prefix(key);
      r.callbacks.push_back({e, e->resolve(s.init_args, prefix), prefix});
      callbacks_yaml.push_back(class_yaml(e->name, r.callbacks.back().args));
    }
  }

  const auto ds = detail::parse_class_section(top["data"], "data");
  r.data = choose(datamodules_, ds, "data", "add_datamodule");
  r.data_prefix = ds.args_prefix("data");
  r.data_args = r.data->resolve(ds.init_args, r.data_prefix);

  const auto ms = detail::parse_class_section(top["model"], "model");
  r.model = choose(models_, ms, "model", "add_model");
  r.model_prefix = ms.args_prefix("model");
  r.model_given = ms.init_args;
  YAML::Node model_args = YAML::Clone(ms.init_args);
  YAML::Node trainer_yaml = options_to_yaml(r.trainer);
  YAML::Node sources(YAML::NodeType::Map);
  sources["trainer"] = trainer_yaml;
  sources["data"] = r.data_args;
  sources["seed_everything"] = detail::YamlCodec<std::optional<int64_t>>::encode(seed);
  sources["ckpt_path"] = r.ckpt_path;
  for (const auto& link : links_) {
    if (link.apply_on != Link::OnParse) continue;
    const auto source = find_path(sources, link.source);
    VOLT_CHECK(source.has_value(), ConfigError, "link_arguments: the source '", link.source,
               "' is not a key of the resolved config");
    const auto given = find_path(model_args, link.target_arg);
    const auto fallback = find_path(r.model->defaults, link.target_arg);
    const LinkValues v{YAML::Clone(*source),
                       given      ? *given
                       : fallback ? *fallback
                                  : YAML::Node(),
                       given.has_value(), detail::join_key(r.model_prefix, link.target_arg)};
    const YAML::Node value = link.compute(v);
    if (given || fallback || !value.IsNull()) set_path(model_args, link.target_arg, value);  // null: not the model's
  }
  r.model_args = r.model->resolve(model_args, r.model_prefix);

  trainer_yaml["callbacks"] = callbacks_yaml;
  r.yaml = YAML::Node(YAML::NodeType::Map);
  r.yaml["trainer"] = trainer_yaml;
  r.yaml["model"] = class_yaml(r.model->name, r.model_args);
  r.yaml["data"] = class_yaml(r.data->name, r.data_args);
  r.yaml["ckpt_path"] = r.ckpt_path;
  r.yaml["seed_everything"] = detail::YamlCodec<std::optional<int64_t>>::encode(seed);
  return r;
}

YAML::Node CLI::resolve(const YAML::Node& config) const { return resolve_config(config).yaml; }

int CLI::run(const cli::Command& command) {
  const std::string& stage = command.subcommand;
  VOLT_CHECK(detail::is_run_subcommand(stage), ConfigError, "unknown subcommand '", stage,
             "'; valid: fit, validate, test, predict");
  Resolved r = resolve_config(command.config);
  std::vector<std::shared_ptr<Callback>> callbacks;
  bool writes_predictions = false;
  for (const auto& c : r.callbacks) {
    callbacks.push_back(c.entry->make(c.args, c.prefix));
    writes_predictions = writes_predictions || dynamic_cast<PredictionWriter*>(callbacks.back().get()) != nullptr;
  }
  // The Trainer checks the combination (strategy, devices, precision) and starts nothing yet, so
  // --print_config fails for every config the run would refuse.
  Trainer trainer(r.trainer, callbacks);
  if (command.print_config) {
    std::cout << YAML::Dump(r.yaml) << std::endl;
    return 0;
  }
  // trainer.max_restarts: this process becomes the node's restart agent and trains nothing itself.
  if (stage == "fit")
    if (auto code = run_elastic(r.trainer.max_restarts, trainer.options().devices, r.trainer.num_nodes)) return *code;
  if (r.trainer.seed) torch::manual_seed(static_cast<uint64_t>(*r.trainer.seed));

  std::shared_ptr<LightningDataModule> data = r.data->make(r.data_args, r.data_prefix);
  bool link_on_instantiate = false;
  for (const auto& l : links_) link_on_instantiate = link_on_instantiate || l.apply_on == Link::OnInstantiate;
  if (link_on_instantiate) {
    // The data module's values exist once it is set up: the Trainer runs prepare_data (rank 0,
    // the other ranks waiting, whatever started them) and setup now, and not again in the run. A
    // data file missing here is found before any work: a configuration error.
    try {
      trainer.prepare_data(*data, stage);
    } catch (const DataError& e) {
      throw ConfigError(e.what());
    }
    for (const auto& link : links_) {
      if (link.apply_on != Link::OnInstantiate) continue;
      const std::string attr = strip(link.source, "data");
      const std::string target_key = detail::join_key(r.model_prefix, link.target_arg);
      if (link.read && !link.read(*data)) continue;  // a link of another data module class
      const auto source = link.read ? link.read(*data) : find_path(data->hparams(), attr);
      VOLT_CHECK(source.has_value(), ConfigError, "link_arguments('", link.source, "' -> '", target_key,
                 "'): the data module ", r.data->name, " has no '", attr, "' in hparams() after setup(\"", stage,
                 "\")");
      const auto current = find_path(r.model_args, link.target_arg);
      const LinkValues v{YAML::Clone(*source), current ? *current : YAML::Node(),
                         find_path(r.model_given, link.target_arg).has_value(), target_key};
      const YAML::Node value = link.compute(v);
      if (current || !value.IsNull()) set_path(r.model_args, link.target_arg, value);  // null: not the model's key
    }
    r.model_args = r.model->resolve(r.model_args, r.model_prefix);  // validated with the linked values
    r.yaml["model"] = class_yaml(r.model->name, r.model_args);      // the saved config shows them
  }
  std::shared_ptr<LightningModule> model = r.model->make(r.model_args, r.model_prefix);
  trainer.set_config(r.yaml);

  if (stage == "fit") {
    trainer.fit(*model, *data, r.ckpt_path);
    if (trainer.is_global_zero() && !trainer.log_dir().empty())
      spdlog::info("fit done: {} steps; logs in {}", trainer.global_step(), trainer.log_dir());
  } else if (stage == "predict") {
    const std::vector<Batch> outputs = trainer.predict(*model, *data, r.ckpt_path, !writes_predictions);
    if (trainer.is_global_zero()) {
      for (const auto& c : trainer.callbacks())
        if (const auto* w = dynamic_cast<const PredictionWriter*>(c.get()))
          spdlog::info("predictions written to {}", w->output_dir());
      if (!writes_predictions)
        spdlog::info("predict done: {} batches on rank 0 (a PredictionWriter callback writes them to files)",
                     outputs.size());
    }
  } else {
    const auto metrics =
        stage == "validate" ? trainer.validate(*model, *data, r.ckpt_path) : trainer.test(*model, *data, r.ckpt_path);
    if (trainer.is_global_zero())
      for (const auto& [k, v] : metrics) std::cout << k << ": " << v << "\n";
  }
  trainer.wait_for_ranks();  // a rank that fails after this one finished fails the command too
  return 0;
}

int CLI::main(int argc, char** argv) {
  if (argc > 0 && argv[0] != nullptr) program_ = std::filesystem::path(argv[0]).filename().string();
  try {
    VOLT_CHECK(registration_errors_.empty(), ConfigError, registration_errors_.front());
    const std::string first = argc >= 2 ? argv[1] : "";
    bool wants_help = first == "help";
    for (int i = 1; i < argc; ++i)
      wants_help = wants_help || std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h";
    const Subcommand* own = nullptr;
    for (const auto& c : subcommands_)
      if (c.name == first) own = &c;
    if (wants_help) {
      std::cout << (first == "consolidate" ? detail::consolidate_usage(program_) : own ? own->usage : help(first));
      return 0;
    }
    if (own) return own->run(argc, argv);
    VOLT_CHECK(argc >= 2, ConfigError, "missing subcommand\n", usage());
    if (first == "consolidate") return detail::run_consolidate(argc, argv, program_);
    VOLT_CHECK(detail::is_run_subcommand(first), ConfigError, "unknown subcommand '", first, "'\n", usage());

    cli::ArgSpec spec{first, {{"config", true, true, 0, "FILE"}, {"print_config", false}}, 0, true, usage()};
    for (const auto& name : detail::launch_flag_names()) spec.flags.push_back({name});
    const cli::Args args = cli::parse_args(spec, argc, argv, 2);
    cli::Command command{first, YAML::Node(), args.has("print_config")};
    const std::vector<std::string> configs = args.all("config");
    std::map<std::string, std::string> launch;
    for (const auto& name : detail::launch_flag_names())
      if (args.has(name)) launch[name] = args.get(name);
    detail::export_launch_flags(launch);
    VOLT_CHECK(!configs.empty(), ConfigError, first,
               ": no --config FILE given (a run needs its trainer, model and data sections)\n", usage());
    command.config = load(configs, args.overrides);
    return run(command);
  } catch (const ConfigError& e) {
    // One write a line: the ranks of a node share stderr, and pieces would interleave.
    std::cerr << program_ + ": config error: " + e.what() + "\n" << std::flush;
    return 2;
  } catch (const c10::Error& e) {
    // LibTorch's own errors (an allocation that failed, say): the message, not its C++ stack trace.
    std::cerr << program_ + ": error: " + e.what_without_backtrace() + "\n" << std::flush;
    return 1;
  } catch (const std::exception& e) {
    std::cerr << program_ + ": error: " + e.what() + "\n" << std::flush;
    return 1;
  }
}

}  // namespace volt
