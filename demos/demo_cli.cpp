#include "volt/demos/demo_cli.h"

#include <spdlog/spdlog.h>

#include <iostream>

#include "volt/core/errors.h"
#include "volt/core/options.h"
#include "volt/demos/language_model.h"
#include "volt/demos/wikitext2_data.h"
#include "volt/trainer/trainer.h"

namespace volt::demos {

namespace {

struct Config {
  TrainerOptions trainer;
  demos::LanguageModelOptions model;
  demos::WikiText2DataOptions data;
  std::string ckpt_path;
  std::optional<int64_t> seed_everything;

  template <class V>
  void visit(V& v) {
    v("trainer", trainer)("model", model)("data", data)("ckpt_path", ckpt_path)("seed_everything", seed_everything);
  }
};

}  // namespace

int run_cli(const cli::Command& args) {
  const YAML::Node& raw = args.config;
  Config cfg = options_from_yaml<Config>(raw, "");
  // Validate everything before any work starts.
  cfg.trainer.validate();
  cfg.model.validate();
  cfg.data.validate();
  VOLT_CHECK(cfg.data.block_size <= kMaxSequenceLength, ConfigError,
             "config key 'data.block_size': ", cfg.data.block_size, " exceeds the demo model's ", kMaxSequenceLength,
             " positions");
  if (cfg.seed_everything && !cfg.trainer.seed) cfg.trainer.seed = cfg.seed_everything;
  YAML::Node resolved = options_to_yaml(cfg);
  // The Trainer checks the combination (strategy, devices, precision) and starts nothing yet, so
  // --print_config fails for every config the run would refuse.
  Trainer trainer(cfg.trainer);
  if (args.print_config) {
    std::cout << YAML::Dump(resolved) << std::endl;
    return 0;
  }
  if (cfg.trainer.seed) torch::manual_seed(static_cast<uint64_t>(*cfg.trainer.seed));
  trainer.set_config(resolved);
  // A missing or unreadable data file is found before any work: a configuration error (exit 2).
  std::unique_ptr<demos::WikiText2Data> data_ptr;
  try {
    data_ptr = std::make_unique<demos::WikiText2Data>(cfg.data);
  } catch (const DataError& e) {
    throw ConfigError(e.what());
  }
  demos::WikiText2Data& data = *data_ptr;
  cfg.model.vocab_size = data.vocab_size();
  demos::LanguageModel model(cfg.model);
  if (args.subcommand == "fit") {
    auto train = data.train_loader();
    auto val = data.val_loader();
    trainer.fit(model, *train, val.get(), cfg.ckpt_path);
    if (trainer.is_global_zero() && !trainer.log_dir().empty())
      spdlog::info("fit done: {} steps; logs in {}", trainer.global_step(), trainer.log_dir());
  } else {
    auto loader = args.subcommand == "validate" ? data.val_loader() : data.test_loader();
    VOLT_CHECK(loader != nullptr, ConfigError, "data: no file configured for '", args.subcommand, "'");
    auto metrics = args.subcommand == "validate" ? trainer.validate(model, *loader, cfg.ckpt_path)
                                                 : trainer.test(model, *loader, cfg.ckpt_path);
    if (trainer.is_global_zero())
      for (const auto& [k, v] : metrics) std::cout << k << ": " << v << "\n";
  }
  return 0;
}

}  // namespace volt::demos
