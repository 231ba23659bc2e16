#include "volt/demos/demo_cli.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <iostream>

#include "volt/core/errors.h"
#include "volt/demos/language_model.h"
#include "volt/demos/llm/generate.h"
#include "volt/demos/llm/llama_lm.h"
#include "volt/demos/llm/token_data.h"
#include "volt/demos/wikitext2_data.h"

namespace volt::demos {

namespace {

/// LanguageModelOptions where vocab_size 0 (the default here) stands for the data's vocabulary
/// size, which the link fills in once the data module is set up.
struct DemoModelOptions : LanguageModelOptions {
  DemoModelOptions() { vocab_size = 0; }

  void validate(const std::string& prefix) const {
    VOLT_CHECK(vocab_size >= 0, ConfigError, "config key '", prefix,
               ".vocab_size': must be >= 0 (0 or absent: the data's vocabulary size), got ", vocab_size);
    LanguageModelOptions rest = *this;  // the other keys, before any work
    if (rest.vocab_size == 0) rest.vocab_size = 1;
    rest.validate(prefix);
  }
};

/// LlamaLMOptions where vocab_size 0 (the default) stands for the tokenizer's vocabulary.
struct LlamaCLIOptions : LlamaLMOptions {
  void validate(const std::string& prefix) const {
    VOLT_CHECK(vocab_size >= 0, ConfigError, "config key '", prefix,
               ".vocab_size': must be >= 0 (0 or absent: the tokenizer's vocabulary size), got ", vocab_size);
    LlamaLMOptions rest = *this;
    if (rest.vocab_size == 0) rest.vocab_size = 1;
    rest.validate(prefix);
  }
};

/// model.vocab_size from the data's vocabulary: 0 takes it; a larger value is honoured (an
/// embedding larger than needed); a smaller one would index past the embedding.
YAML::Node link_vocab_size(const LinkValues& v) {
  const int64_t data_vocab = v.source.as<int64_t>();
  const int64_t model_vocab = v.target.as<int64_t>();
  if (model_vocab == 0) return v.source;
  VOLT_CHECK(model_vocab >= data_vocab, ConfigError, "config key '", v.target_key, "': ", model_vocab,
             " is smaller than the data's vocabulary (", data_vocab,
             " tokens), whose token ids would index past the embedding; remove the key (or set 0) ",
             "to use the data's vocabulary size, or set it to at least ", data_vocab);
  return v.target;
}

/// model.max_position_embeddings against data.block_size: a check, not a fill (the model's table
/// may be longer than the windows); shorter would fail at the first forward, after set-up. A
/// model without the key (LanguageModel) is left as it is.
YAML::Node check_positions(const LinkValues& v) {
  if (v.target.IsNull()) return v.target;  // a model without a position table (LanguageModel)
  const int64_t block = v.source.as<int64_t>();
  const int64_t positions = v.target.as<int64_t>();
  VOLT_CHECK(positions >= block, ConfigError, "config key '", v.target_key, "': ", positions,
             " is shorter than data.block_size (", block, " tokens a sample); raise it to at least ", block,
             " or lower data.block_size");
  return v.target;
}

}  // namespace

void register_demo(CLI& cli) {
  cli.add_model<DemoModelOptions>("LanguageModel", [](const DemoModelOptions& o) {
    return std::make_shared<LanguageModel>(static_cast<const LanguageModelOptions&>(o));
  });
  cli.add_datamodule<WikiText2Data>("WikiText2Data");
  cli.link_arguments<WikiText2Data>(
      "data.vocab_size", [](const WikiText2Data& d) { return d.num_words(); }, "model.vocab_size", link_vocab_size);
  // The LLM workload (configs/llm/): a config names it with class_path; the flat form means the demo.
  cli.add_model<LlamaCLIOptions>("LlamaLM", [](const LlamaCLIOptions& o) {
    return std::make_shared<LlamaLM>(static_cast<const LlamaLMOptions&>(o));
  });
  cli.add_datamodule<TokenData>("TokenData");
  cli.link_arguments<TokenData>(
      "data.vocab_size", [](const TokenData& d) { return d.vocab_size(); }, "model.vocab_size", link_vocab_size);
  // At parse time, before any data is prepared: both data classes have block_size.
  cli.link_arguments("data.block_size", "model.max_position_embeddings", Link::OnParse, check_positions);
  cli.set_default_model("LanguageModel");
  cli.set_default_datamodule("WikiText2Data");
  cli.add_subcommand("generate", "Continues a prompt with a trained LlamaLM checkpoint (KV cache, top-k).",
                     generate_usage("volt"), [](int argc, char** argv) {
                       // The text is the command's output (`volt generate ... > out.txt`): the
                       // log lines go to stderr, as Hugging Face's and llama.cpp's do.
                       spdlog::set_default_logger(std::make_shared<spdlog::logger>(
                           "", std::make_shared<spdlog::sinks::stderr_color_sink_mt>()));
                       return run_generate(parse_generate_args(argc, argv, 2), std::cout);
                     });
}

int run_cli(const cli::Command& command) {
  CLI cli;
  register_demo(cli);
  return cli.run(command);
}

}  // namespace volt::demos
