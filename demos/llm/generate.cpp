#include "volt/demos/llm/generate.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <filesystem>
#include <ostream>

#include "volt/checkpoint/checkpoint_reader.h"
#include "volt/checkpoint/weights.h"
#include "volt/cli/args.h"
#include "volt/cli/config_files.h"
#include "volt/core/errors.h"
#include "volt/core/options.h"
#include "volt/demos/llm/llama_lm.h"
#include "volt/demos/llm/token_data.h"
#include "volt/demos/llm/tokenizer.h"

namespace volt::demos {

namespace fs = std::filesystem;

namespace {

/// `{class_path, init_args}` or the flat form: the options map either way.
YAML::Node init_args(const YAML::Node& section) {
  if (section && section.IsMap() && section["init_args"]) return section["init_args"];
  return section;
}

/// The `model:` and `data:` sections of the run: from --config, else from the checkpoint's saved
/// config (a volt checkpoint written by the CLI), else the model's saved hyper-parameters.
std::pair<YAML::Node, YAML::Node> run_sections(const GenerateOptions& o) {
  if (!o.config.empty()) {
    const YAML::Node c = detail::read_config_file(o.config);
    VOLT_CHECK(c["model"], ConfigError, "--config ", o.config, ": has no 'model:' section");
    return {init_args(c["model"]), init_args(c["data"])};
  }
  YAML::Node meta;
  try {
    meta = CheckpointReader(o.ckpt_path).meta();
  } catch (const CheckpointError& e) {
    throw ConfigError(detail::str_cat(e.what(), "\n(a file that is not a volt checkpoint, such as a safetensors ",
                                      "export, needs --config with the run's model: section, and --tokenizer)"));
  }
  if (meta["config"] && meta["config"]["model"]) {
    const YAML::Node model = meta["config"]["model"];
    const std::string cls = model["class_path"] ? model["class_path"].as<std::string>() : "LlamaLM";
    VOLT_CHECK(cls == "LlamaLM", ConfigError, "volt generate: ", o.ckpt_path, " was written by a run of model '", cls,
               "'; generate works with LlamaLM checkpoints (configs/llm/*.yaml)");
    return {init_args(model), init_args(meta["config"]["data"])};
  }
  VOLT_CHECK(meta["hyper_parameters"], ConfigError, "volt generate: ", o.ckpt_path,
             " records neither its config nor the model's hyper-parameters; pass --config");
  return {meta["hyper_parameters"], meta["datamodule_hyper_parameters"]};
}

std::string tokenizer_file(const GenerateOptions& o, const YAML::Node& data) {
  if (!o.tokenizer.empty()) return o.tokenizer;
  VOLT_CHECK(data && data.IsMap(), ConfigError, "volt generate: ", o.ckpt_path,
             " records no data options to find its tokenizer; pass --tokenizer=<file.model>");
  const auto d = options_from_yaml<TokenDataOptions>(data, "data");
  const std::string path = d.tokenizer_path();
  VOLT_CHECK(!path.empty(), ConfigError, "volt generate: the run trained on a token file without a named tokenizer; ",
             "pass --tokenizer=<file.model>");
  VOLT_CHECK(fs::exists(path), ConfigError, "volt generate: the run's tokenizer ", path,
             " does not exist (run from the training run's directory, or pass --tokenizer=<file.model>)");
  return path;
}

}  // namespace

std::string generate_usage(const std::string& program) {
  return detail::str_cat(
      "usage: ", program,
      " generate --ckpt_path=PATH [--prompt TEXT] [--max_new_tokens 50] [--temperature 0.8] [--top_k 50]\n",
      "       [--seed 0] [--tokenizer FILE.model] [--config RUN.yaml] [--add_bos true]\n",
      "Continues PROMPT with a LlamaLM checkpoint (full file, sharded folder, or with --config a safetensors\n",
      "export); temperature 0 is greedy, top_k 0 samples from every token.\n");
}

GenerateOptions parse_generate_args(int argc, char** argv, int first) {
  cli::ArgSpec spec{"generate",
                    {{"ckpt_path"},
                     {"prompt"},
                     {"tokenizer"},
                     {"config"},
                     {"max_new_tokens"},
                     {"temperature"},
                     {"top_k"},
                     {"seed"},
                     {"add_bos"}},
                    0,
                    false,
                    generate_usage("volt")};
  const cli::Args a = cli::parse_args(spec, argc, argv, first);
  GenerateOptions o;
  o.ckpt_path = a.get("ckpt_path");
  VOLT_CHECK(!o.ckpt_path.empty(), ConfigError, "generate: --ckpt_path is required\n", spec.usage);
  o.prompt = a.get("prompt");
  o.tokenizer = a.get("tokenizer");
  o.config = a.get("config");
  o.max_new_tokens = a.get_int("max_new_tokens", o.max_new_tokens, 0, 1 << 20);
  o.temperature = a.get_double("temperature", o.temperature);
  VOLT_CHECK(o.temperature >= 0.0, ConfigError, "generate: --temperature must be >= 0 (0: greedy), got ",
             o.temperature);
  o.top_k = a.get_int("top_k", o.top_k, 0);
  o.seed = a.get_int("seed", o.seed);
  const std::string bos = a.get("add_bos", "true");
  VOLT_CHECK(bos == "true" || bos == "false", ConfigError, "generate: --add_bos must be true or false, got '", bos,
             "'");
  o.add_bos = bos == "true";
  return o;
}

int run_generate(const GenerateOptions& o, std::ostream& out) {
  VOLT_CHECK(fs::exists(o.ckpt_path), ConfigError, "--ckpt_path: ", o.ckpt_path, " does not exist");
  const auto [model_args, data_args] = run_sections(o);
  auto options = options_from_yaml<LlamaLMOptions>(model_args, "model");
  const std::string tokenizer_path = tokenizer_file(o, data_args);
  std::unique_ptr<const Tokenizer> loaded;
  try {
    loaded = std::make_unique<const Tokenizer>(tokenizer_path);
  } catch (const DataError& e) {  // a file the user named (or the run's): bad input, exit 2
    throw ConfigError(
        detail::str_cat(o.tokenizer.empty() ? "volt generate: the run's tokenizer: " : "--tokenizer: ", e.what()));
  }
  const Tokenizer& tokenizer = *loaded;
  // A run config's vocab_size 0 is the data's vocabulary, which for TokenData is the tokenizer's.
  if (options.vocab_size == 0) options.vocab_size = tokenizer.vocab_size();
  VOLT_CHECK(tokenizer.vocab_size() <= options.vocab_size, ConfigError, "volt generate: the tokenizer has ",
             tokenizer.vocab_size(), " pieces, the model's vocabulary only ", options.vocab_size,
             "; pass the tokenizer the model was trained with");

  VOLT_CHECK(!o.add_bos || tokenizer.bos_id() >= 0, ConfigError, "volt generate: --add_bos is true but the tokenizer '",
             tokenizer_path, "' has no <s> piece; pass --add_bos false (and a --prompt)");
  std::vector<int64_t> ids;
  try {
    ids = tokenizer.encode(o.prompt, o.add_bos);
  } catch (const DataError& e) {
    throw ConfigError(detail::str_cat("--prompt: ", e.what()));
  }
  VOLT_CHECK(!ids.empty(), ConfigError, "volt generate: the prompt is empty and --add_bos is false: nothing to ",
             "continue; give --prompt or --add_bos true");

  LlamaLM model(options);
  model.configure_model();
  const auto report = load_weights(model, o.ckpt_path);
  spdlog::info("generate: {} tensors from {} ({})", report.loaded, o.ckpt_path, report.format);
  auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(o.seed));
  const auto t0 = std::chrono::steady_clock::now();
  const auto next = model.generate(torch::tensor(ids, torch::kLong), o.max_new_tokens, o.temperature, o.top_k,
                                   tokenizer.eos_id(), gen, tokenizer.vocab_size());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<int64_t> all = ids;
  for (int64_t i = 0; i < next.numel(); ++i) all.push_back(next[i].item<int64_t>());
  out << tokenizer.decode(all) << std::endl;
  spdlog::info("generate: {} tokens in {:.3f} s ({:.1f} tokens/s, prompt {} tokens)", next.numel(), s,
               next.numel() / std::max(s, 1e-9), ids.size());
  return 0;
}

}  // namespace volt::demos
