#pragma once
/// `volt generate`: text from a trained LlamaLM checkpoint.
///
///   volt generate --ckpt_path=runs/llm-tiny/checkpoints/last.ckpt --prompt "The film"
///                 --max_new_tokens 50 --temperature 0.8 --top_k 50 --seed 1   (one command line)
///
/// The model's shape and the tokenizer come from the run's config saved in the checkpoint (the
/// `model:` options, and the data options' tokenizer file); `--tokenizer` names another .model
/// file. A full checkpoint, a sharded folder and a safetensors export (with --config or
/// --tokenizer plus the model options in --config) are all read through load_weights.
///
/// Thread-safety: none (a command's one thread).
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace volt::demos {

struct GenerateOptions {
  std::string ckpt_path;
  std::string prompt;
  std::string tokenizer;  ///< "": the tokenizer of the run that wrote the checkpoint
  std::string config;     ///< a YAML file with `model:` (and `data:`) for files that carry no config
  int64_t max_new_tokens = 50;
  double temperature = 0.8;  ///< 0: greedy
  int64_t top_k = 50;        ///< 0: every token
  int64_t seed = 0;
  bool add_bos = true;  ///< start the prompt with <s>, as the training text's lines do
};

/// The words after `generate` (`--key=value` or `--key value`) to options: ConfigError naming an
/// unknown flag, a missing or malformed value, or a missing --ckpt_path.
GenerateOptions parse_generate_args(int argc, char** argv, int first);
std::string generate_usage(const std::string& program);

/// Loads the model and the tokenizer, writes the prompt and its continuation to `out`, and logs the
/// tokens generated and their rate. Returns 0.
int run_generate(const GenerateOptions& options, std::ostream& out);

}  // namespace volt::demos
