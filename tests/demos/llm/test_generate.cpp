// `volt generate` (demos/llm/generate.cpp) on checkpoints of short TokenData fits: a vocabulary
// padded past the tokenizer's, a config whose vocab_size is 0 (the tokenizer's), the context it
// needs, what is refused, and its output streams.
#include <torch/torch.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "llm_data_support.h"
#include "volt/core/errors.h"
#include "volt/demos/llm/generate.h"
#include "volt/demos/llm/llama_lm.h"
#include "volt/demos/llm/token_data.h"
#include "volt/demos/llm/tokenizer.h"
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

TEST_CASE("volt generate: the context it needs, unusable tokenizers and prompts, the text alone on stdout",
          "[demos][llm][generate]") {
  const std::string dir = temp_dir("llm-generate-edges");
  const std::string ckpt = fit_and_save(dir, 400);  // max_position_embeddings 128
  const demos::Tokenizer tok(small_fixture() + "/tok.model");
  auto g = sampling(ckpt);
  g.temperature = 0.0;
  const int64_t prompt = static_cast<int64_t>(tok.encode(g.prompt, true).size());
  // The last new token is not fed back: prompt + max_new_tokens - 1 positions, as Hugging Face.
  g.max_new_tokens = 128 - prompt + 1;
  std::ostringstream fits;
  CHECK(demos::run_generate(g, fits) == 0);
  g.max_new_tokens += 1;
  CHECK_THROWS_WITH(demos::run_generate(g, fits), Catch::Contains("need 129 positions"));

  g = sampling(ckpt);
  g.max_new_tokens = 2;
  g.tokenizer = dir + "/nowhere.model";
  CHECK_THROWS_AS(demos::run_generate(g, fits), ConfigError);
  g.tokenizer = ckpt;  // not a SentencePiece model
  CHECK_THROWS_WITH(demos::run_generate(g, fits), Catch::StartsWith("--tokenizer: "));
  g = sampling(ckpt);
  g.prompt = "caf\xe9";
  CHECK_THROWS_WITH(demos::run_generate(g, fits), Catch::StartsWith("--prompt: ") && Catch::Contains("UTF-8"));

  // A tokenizer without <s> (the piece renamed in the model file): --add_bos true cannot hold, and
  // TokenData refuses data.add_bos rather than run the lines together.
  std::string bytes = read_text(small_fixture() + "/tok.model");
  const size_t at = bytes.find("<s>");
  REQUIRE(at != std::string::npos);
  bytes.replace(at, 3, "<q>");
  const std::string no_bos = dir + "/no-bos.model";
  write_file(no_bos, bytes);
  REQUIRE(demos::Tokenizer(no_bos).bos_id() < 0);
  g = sampling(ckpt);
  g.tokenizer = no_bos;
  CHECK_THROWS_WITH(demos::run_generate(g, fits), Catch::Contains("has no <s> piece"));
  g.add_bos = false;
  CHECK(demos::run_generate(g, fits) == 0);
  auto data_opts = data_options(dir);
  data_opts.tokenizer = no_bos;
  demos::TokenData data(data_opts);
  CHECK_THROWS_WITH(data.prepare_data(), Catch::Contains("data.add_bos is true") && Catch::Contains("no <s> piece"));

  // The command: the text on stdout, the log lines on stderr.
  const std::string cmd = std::string(VOLT_CLI) + " generate --ckpt_path=" + ckpt + " --tokenizer=" + small_fixture() +
                          "/tok.model --prompt 'The river' --max_new_tokens 5 --temperature 0 > " + dir +
                          "/out.txt 2> " + dir + "/err.txt";
  REQUIRE(std::system(cmd.c_str()) == 0);
  const std::string out = read_text(dir + "/out.txt"), err = read_text(dir + "/err.txt");
  CHECK(out.rfind("The river", 0) == 0);
  CHECK(std::count(out.begin(), out.end(), '\n') == 1);
  CHECK(out.find("[info]") == std::string::npos);
  CHECK_THAT(err, Catch::Contains("generate: ") && Catch::Contains(" tokens in "));
}
