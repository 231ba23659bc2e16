// `volt generate` (demos/llm/generate.cpp) on checkpoints of short TokenData fits: a vocabulary
// padded past the tokenizer's, a config whose vocab_size is 0 (the tokenizer's), and what is refused.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <sstream>

#include "llm_data_support.h"
#include "volt/core/errors.h"
#include "volt/demos/llm/generate.h"
#include "volt/demos/llm/llama_lm.h"
#include "volt/demos/llm/token_data.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;

namespace {

demos::TokenDataOptions data_options(const std::string& dir) {
  demos::TokenDataOptions o;
  o.data_dir = small_fixture();
  o.train_file = "small.txt";
  o.val_file = "";
  o.test_file = "";
  o.cache_dir = dir + "/cache";
  o.tokenizer = small_fixture() + "/tok.model";  // 400 pieces
  o.block_size = 16;
  o.batch_size = 4;
  return o;
}

demos::LlamaLMOptions model_options(int64_t vocab_size) {
  demos::LlamaLMOptions m;
  m.vocab_size = vocab_size;
  m.hidden_size = 16;
  m.num_hidden_layers = 1;
  m.num_attention_heads = 2;
  m.intermediate_size = 32;
  m.max_position_embeddings = 128;
  return m;
}

/// Two steps of LlamaLM on the small corpus, saved to `dir`/last.ckpt (the model's
/// hyper-parameters in its meta).
std::string fit_and_save(const std::string& dir, int64_t vocab_size) {
  torch::manual_seed(1);
  demos::LlamaLM model(model_options(vocab_size));
  demos::TokenData data(data_options(dir));
  auto opts = quiet_options(dir + "/run");
  opts.max_steps = 2;
  opts.limit_val_batches = BatchLimit::count(0);
  Trainer trainer(opts);
  trainer.fit(model, data);
  const std::string path = dir + "/last.ckpt";
  trainer.save_checkpoint(path);
  return path;
}

demos::GenerateOptions sampling(const std::string& ckpt) {
  demos::GenerateOptions g;
  g.ckpt_path = ckpt;
  g.tokenizer = small_fixture() + "/tok.model";  // saved after fit: no data module's options in it
  g.prompt = "The river";
  g.max_new_tokens = 60;
  g.temperature = 3.0;  // near uniform: a padded id would be drawn within a few tokens
  g.top_k = 0;
  g.seed = 2;
  return g;
}

}  // namespace

TEST_CASE("volt generate: a vocabulary padded past the tokenizer's never yields an id it cannot decode",
          "[demos][llm][generate]") {
  const std::string dir = temp_dir("llm-generate-padded");
  const std::string ckpt = fit_and_save(dir, 1024);  // 624 ids the tokenizer does not have
  for (const int64_t top_k : {0, 50}) {
    for (const double temperature : {0.0, 3.0, 1e-39}) {
      auto g = sampling(ckpt);
      g.top_k = top_k;
      g.temperature = temperature;
      std::ostringstream out;
      CHECK(demos::run_generate(g, out) == 0);
      CHECK(out.str().rfind("The river", 0) == 0);
      CHECK(out.str().size() > std::string("The river\n").size());
    }
  }
}

TEST_CASE("volt generate --config: vocab_size 0 (or absent) is the tokenizer's, as in training",
          "[demos][llm][generate]") {
  const std::string dir = temp_dir("llm-generate-config");
  const std::string ckpt = fit_and_save(dir, 400);
  const std::string config = dir + "/run.yaml";
  const std::string model =
      "model:\n  class_path: LlamaLM\n  init_args:\n    hidden_size: 16\n    num_hidden_layers: 1\n"
      "    num_attention_heads: 2\n    intermediate_size: 32\n    max_position_embeddings: 128\n";
  write_file(config, model + "    vocab_size: 0\n");
  auto g = sampling(ckpt);
  g.config = config;
  std::ostringstream with_config, from_checkpoint;
  CHECK(demos::run_generate(g, with_config) == 0);
  CHECK(demos::run_generate(sampling(ckpt), from_checkpoint) == 0);
  CHECK(with_config.str() == from_checkpoint.str());  // the same model, the same seed
  // A vocabulary smaller than the tokenizer's is refused, naming both.
  write_file(config, model + "    vocab_size: 300\n");
  std::ostringstream out;
  CHECK_THROWS_WITH(demos::run_generate(g, out),
                    Catch::Contains("the tokenizer has 400 pieces, the model's vocabulary only 300"));
}
