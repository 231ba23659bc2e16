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
  // model.vocab_size 0 (the CLI's default) means the data's vocabulary size.
  Config() { model.vocab_size = 0; }

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
  VOLT_CHECK(cfg.model.vocab_size >= 0, ConfigError, "config key 'model.vocab_size': must be >= 0 (0 or absent: the ",
             "data's vocabulary size), got ", cfg.model.vocab_size);
  {
    LanguageModelOptions check = cfg.model;  // the rest of the model's options, before any work
    if (check.vocab_size == 0) check.vocab_size = 1;
    check.validate();
  }
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
  // A missing or unreadable data file is found before any work: a configuration error (exit 2).
  std::unique_ptr<demos::WikiText2Data> data_ptr;
  try {
    data_ptr = std::make_unique<demos::WikiText2Data>(cfg.data);
  } catch (const DataError& e) {
    throw ConfigError(e.what());
  }
  demos::WikiText2Data& data = *data_ptr;
  // Unset: the data's vocabulary. Set: honoured when it covers every token id (a larger embedding
  // than needed is allowed); smaller would index past the embedding.
  const int64_t data_vocab = data.vocab_size();
  if (cfg.model.vocab_size == 0) {
    cfg.model.vocab_size = data_vocab;
  } else {
    VOLT_CHECK(cfg.model.vocab_size >= data_vocab, ConfigError, "config key 'model.vocab_size': ", cfg.model.vocab_size,
               " is smaller than the vocabulary of the data in '", cfg.data.data_dir, "' (", data_vocab,
               " tokens), whose token ids would index past the embedding; remove the key (or set 0) ",
               "to use the data's vocabulary size, or set it to at least ", data_vocab);
  }
  resolved["model"]["vocab_size"] = cfg.model.vocab_size;  // the saved config shows the size used
  trainer.set_config(resolved);
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
