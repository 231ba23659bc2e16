#include "volt/cli/cli_help.h"

#include <algorithm>
#include <sstream>

#include "volt/cli/cli.h"
#include "volt/cli/consolidate.h"
#include "volt/trainer/trainer_options.h"

namespace volt {

namespace detail {

const std::vector<std::string>& run_subcommands() {
  static const std::vector<std::string> names = {"fit", "validate", "test", "predict"};
  return names;
}

bool is_run_subcommand(const std::string& name) {
  const auto& n = run_subcommands();
  return std::find(n.begin(), n.end(), name) != n.end();
}

std::string cli_usage(const std::string& program) {
  return "usage: " + program + " {fit,validate,test,predict} [--config FILE ...] [--KEY=VALUE ...] [--print_config]\n" +
         "       " + program + " consolidate SHARDED_CHECKPOINT [-o FILE] [--format volt|safetensors] [--overwrite]\n" +
         "       " + program + " [SUBCOMMAND] --help\n";
}

std::vector<OptionHelp> trainer_help() {
  std::vector<OptionHelp> out;
  const TrainerOptions defaults;
  for (const auto& e : options_help(defaults, "trainer")) {
    if (e.key == "trainer.logger") {
      // true, false, a name, or a list of names and {class_path, init_args} (loggers/logger_options.h).
      out.push_back({e.key, e.type, e.default_value, "true (csv), false, csv, tensorboard, or a list of these or of:"});
      out.push_back({e.key + "[i].class_path", "CSVLogger|TensorBoardLogger", "", ""});
      for (auto h : options_help(LoggerConfig("tensorboard"), e.key + "[i].init_args")) {
        if (h.key.size() > 18 && h.key.compare(h.key.size() - 18, 18, ".default_hp_metric") == 0)
          h.note = "TensorBoardLogger only";
        else if (h.key.size() > 9 && h.key.compare(h.key.size() - 9, 9, ".save_dir") == 0)
          h.note = "\"\": trainer.default_root_dir";
        out.push_back(h);
      }
      continue;
    }
    if (e.key != "trainer.strategy") {
      out.push_back(e);
      continue;
    }
    // A name, or a map of the name and the chosen strategy's keys (strategies/strategy_options.h).
    out.push_back({e.key, "str|map", defaults.strategy.name, "a strategy name, or a map of name and its keys:"});
    out.push_back({e.key + ".name", "auto|single_device|ddp|fsdp|fsdp_cpu_offload", defaults.strategy.name, ""});
    for (auto h : options_help(DDPOptions{}, e.key)) {
      h.note = "with name: ddp";
      out.push_back(h);
    }
    for (auto h : options_help(FSDPOptions{}, e.key)) {
      if (h.key == e.key + ".auto_wrap_policy.every_n_modules") continue;  // activation checkpointing's only
      h.note = "with name: fsdp";
      out.push_back(h);
    }
    for (auto h : options_help(ModulePolicy{}, e.key + ".activation_checkpointing_policy")) {
      h.note = "with name: auto, single_device or ddp";
      out.push_back(h);
    }
  }
  out.push_back({"trainer.callbacks", "list[{class_path, init_args}]", "[]", "the callback classes below"});
  return out;
}

namespace {

const char* about(const std::string& subcommand) {
  if (subcommand == "fit") return "Trains the model (Trainer::fit), validating as trainer.val_check_interval says.";
  if (subcommand == "validate") return "Runs one validation epoch (Trainer::validate) and prints its metrics.";
  if (subcommand == "test") return "Runs one test epoch (Trainer::test) and prints its metrics.";
  return "Runs predict_step over the data module's predict data (Trainer::predict).\n"
         "A PredictionWriter callback in trainer.callbacks writes the predictions to files.";
}

constexpr const char* kOptions =
    "options:\n"
    "  --config FILE     a YAML config with sections trainer, model, data, ckpt_path, seed_everything;\n"
    "                    several are merged in order (later files override the keys they name)\n"
    "  --KEY=VALUE       override any key (a dotted path, a YAML value), e.g. --trainer.max_steps=20,\n"
    "                    --model.init_args.hidden=64 (or --model.hidden=64), --model=OtherNet\n"
    "  --print_config    print the resolved config (every key, defaults included) and exit\n"
    "  --node_rank=N --master_addr=HOST --master_port=PORT\n"
    "                    one command per node for trainer.num_nodes > 1 without torchrun or SLURM: this\n"
    "                    node's rank (0 on the master's host) and where rank 0 serves the rendezvous\n"
    "  -h, --help        print this help and exit\n";

template <class Base>
void class_section_help(std::ostringstream& os, const ClassRegistry<Base>& registry, const std::string& key,
                        const std::string& adder) {
  const auto& entries = registry.entries();
  os << "\n" << key << ": a " << registry.kind() << ", {class_path: NAME, init_args: {KEY: VALUE}}";
  if (entries.empty()) {
    os << "; none registered (the program registers them with CLI::" << adder << ")\n";
    return;
  }
  os << "; registered: " << registry.names() << "\n";
  if (entries.size() == 1)
    os << "  (the only " << registry.kind() << " class: `" << key << ": {KEY: VALUE}` and --" << key
       << ".KEY=VALUE work too)\n";
  for (const auto& e : entries) {
    os << "  " << e.name << (e.help.empty() ? " (no init_args)" : "") << ":\n";
    os << format_options_help(e.help, "--" + key + ".init_args.", "    ");
  }
}

}  // namespace

}  // namespace detail

std::string CLI::usage() const {
  std::string out = detail::cli_usage(program_);
  for (const auto& s : subcommands_) out += "       " + program_ + " " + s.name + " ...   (" + s.name + " --help)\n";
  return out;
}

std::string CLI::help(const std::string& subcommand) const {
  std::ostringstream os;
  if (!detail::is_run_subcommand(subcommand)) {
    os << usage() << "\nsubcommands:\n";
    for (const auto& s : detail::run_subcommands()) {
      const std::string d = detail::about(s);
      os << "  " << s << std::string(13 - s.size(), ' ') << d.substr(0, d.find('\n')) << "\n";
    }
    os << "  consolidate  Turns a sharded checkpoint folder into one full checkpoint file.\n";
    for (const auto& c : subcommands_)
      os << "  " << c.name << std::string(c.name.size() < 13 ? 13 - c.name.size() : 1, ' ') << c.summary << "\n";
    os << "\n"
       << detail::kOptions << "\nmodels: " << models_.names() << "\ndata modules: " << datamodules_.names()
       << "\ncallbacks: " << callbacks_.names() << "\n\n"
       << "'" << program_ << " fit --help' lists every key with its type and default.\n";
    return os.str();
  }
  os << "usage: " << program_ << " " << subcommand << " [--config FILE ...] [--KEY=VALUE ...] [--print_config]\n\n"
     << detail::about(subcommand) << "\n\n"
     << detail::kOptions;
  os << "\ntop-level keys:\n"
     << format_options_help({{"seed_everything", "int|null", "null", "seeds torch before the model is built"},
                             {"ckpt_path", "str", "\"\"",
                              "the checkpoint to start from (a file, or last: the newest in the checkpoint folder)"}},
                            "--", "  ");
  // The strategy's keys apart: they are long, and only the chosen strategy's apply.
  std::vector<OptionHelp> trainer, strategy;
  for (auto& e : detail::trainer_help()) (e.key.rfind("trainer.strategy.", 0) == 0 ? strategy : trainer).push_back(e);
  os << "\ntrainer: the Trainer's options\n"
     << format_options_help(trainer, "--", "  ")
     << "\ntrainer.strategy as a map: its name and the keys of that strategy\n"
     << format_options_help(strategy, "--", "  ");
  detail::class_section_help(os, models_, "model", "add_model");
  detail::class_section_help(os, datamodules_, "data", "add_datamodule");
  os << "\ntrainer.callbacks: a list of {class_path: NAME, init_args: {KEY: VALUE}}; registered: " << callbacks_.names()
     << "\n";
  for (const auto& e : callbacks_.entries()) {
    os << "  " << e.name << (e.help.empty() ? " (no init_args)" : "") << ":\n";
    os << format_options_help(e.help, "init_args.", "    ");
  }
  if (!links_.empty()) {
    os << "\nlinked arguments (set by the program, LightningCLI's link_arguments):\n";
    std::vector<std::string> lines;  // two data classes linking the same key read alike: one line
    for (const auto& l : links_) {
      std::string line =
          "  model.init_args." + l.target_arg + " from " + l.source +
          (l.apply_on == Link::OnInstantiate ? " (the data module's, after its setup)" : " (the config's)");
      if (std::find(lines.begin(), lines.end(), line) == lines.end()) lines.push_back(std::move(line));
    }
    for (const auto& line : lines) os << line << "\n";
  }
  return os.str();
}

}  // namespace volt
