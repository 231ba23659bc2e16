// load_from_checkpoint (cli/load_from_checkpoint.h): the demo LanguageModel and a LlamaLM trained
// through the CLI come back from their checkpoints (full, and sharded under FSDP) with the saved
// init args and weights; overrides, another class, a foreign file and a checkpoint without
// hyper-parameters.
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "boring_model.h"
#include "demos/llm/llm_data_support.h"
#include "trainer/trainer_support.h"
#include "volt/checkpoint/checkpoint.h"
#include "volt/checkpoint/checkpoint_reader.h"
#include "volt/checkpoint/weights.h"
#include "volt/cli/cli.h"
#include "volt/cli/load_from_checkpoint.h"
#include "volt/core/errors.h"
#include "volt/demos/demo_cli.h"
#include "volt/demos/language_model.h"
#include "volt/demos/llm/llama_lm.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

/// A tiny corpus in `dir` (as tests/demos/test_demo_cli.cpp's).
void write_corpus(const std::string& dir) {
  std::ofstream(dir + "/train.txt") << " the cat sat on the mat \n the dog sat on the log \n"
                                       " a cat and a dog \n the end of the story \n";
}

/// `volt fit` of the demo LanguageModel for 3 steps (dropout 0.2, nhid 8), in this process;
/// returns its last.ckpt.
std::string fit_language_model(const std::string& dir) {
  write_corpus(dir);
  YAML::Node cfg = YAML::Load(
      "trainer: {max_steps: 3, enable_progress_bar: false, enable_model_summary: false, num_sanity_val_steps: 0, "
      "limit_val_batches: 0, callbacks: [{class_path: ModelCheckpoint, init_args: {every_n_train_steps: 1, "
      "save_last: true}}]}\n"
      "model: {ninp: 8, nhead: 2, nhid: 8, nlayers: 1, dropout: 0.2, lr: 0.3}\n"
      "data: {train_file: train.txt, val_file: '', test_file: train.txt, block_size: 4, batch_size: 2}\n");
  cfg["trainer"]["default_root_dir"] = dir;
  cfg["trainer"]["callbacks"][0]["init_args"]["dirpath"] = dir + "/ckpt";
  cfg["data"]["data_dir"] = dir;
  REQUIRE(demos::run_cli({"fit", cfg, false}) == 0);
  REQUIRE(fs::is_regular_file(dir + "/ckpt/last.ckpt"));
  return dir + "/ckpt/last.ckpt";
}

/// Every parameter and buffer of `m` equals the checkpoint's, bit for bit.
void check_weights(torch::nn::Module& m, const std::string& path) {
  const CheckpointReader r(path);
  int64_t n = 0;
  auto check = [&](const std::string& name, const torch::Tensor& t) {
    if (!r.has(kModelSection, name)) return;  // a tied weight is saved under its first name
    CHECK(torch::equal(t, r.read(kModelSection, name).to(t.scalar_type())));
    ++n;
  };
  for (const auto& p : m.named_parameters()) check(p.key(), p.value());
  for (const auto& b : m.named_buffers()) check(b.key(), b.value());
  CHECK(n == static_cast<int64_t>(r.names(kModelSection).size()));
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

/// A module whose hparams() returns its options (or none, with `Silent`), for checkpoints written
/// without the CLI.
struct NetOptions {
  int64_t hidden = 4;
  template <class V>
  void visit(V& v) {
    v("hidden", hidden);
  }
};
template <bool Silent>
class Net : public LightningModule {
 public:
  using Options = NetOptions;
  explicit Net(NetOptions o = {}) : LightningModule("Net"), o_(o) {
    fc = register_module("fc", torch::nn::Linear(32, o.hidden));
  }
  torch::Tensor training_step(const Batch& b, int64_t) override { return fc->forward(b[0]).pow(2).mean(); }
  Optimizers configure_optimizers() override {
    OptimizerConfig c;
    c.optimizer = std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1));
    return c;
  }
  YAML::Node hparams() const override { return Silent ? YAML::Node(YAML::NodeType::Map) : options_to_yaml(o_); }
  torch::nn::Linear fc{nullptr};

 private:
  NetOptions o_;
};

/// One step of `M` (hidden 6) through the Trainer, saved at `path`.
template <class M>
void fit_net(const std::string& dir, const std::string& path) {
  torch::manual_seed(5);
  M m(NetOptions{6});
  DataLoader loader = make_loader(8, 8);
  TrainerOptions o = quiet_options(dir);
  o.max_steps = 1;
  Trainer trainer(o);
  trainer.fit(m, loader);
  trainer.save_checkpoint(path);
}

}  // namespace

TEST_CASE("load_from_checkpoint: the demo LanguageModel trained through the CLI comes back equal",
          "[cli][load_from_checkpoint]") {
  const std::string dir = temp_dir("lfc-lm");
  const std::string path = fit_language_model(dir);
  auto typed = load_from_checkpoint<demos::LanguageModel>(path);
  CHECK_FALSE(typed->is_training());
  CHECK(typed->options().nhid == 8);  // the saved init args, not the defaults
  CHECK(typed->options().dropout == 0.2);
  check_weights(*typed, path);

  CLI cli;
  demos::register_demo(cli);
  std::shared_ptr<LightningModule> by_name = cli.load_from_checkpoint(path);
  auto* named = dynamic_cast<demos::LanguageModel*>(by_name.get());
  REQUIRE(named != nullptr);
  CHECK_FALSE(named->is_training());

  // The module built by hand from the saved hyper-parameters, with load_weights.
  const YAML::Node hp = CheckpointReader(path).meta()["hyper_parameters"];
  demos::LanguageModel by_hand(options_from_yaml<demos::LanguageModelOptions>(hp, "model"));
  by_hand.configure_model();
  load_weights(by_hand, path);
  by_hand.eval();

  torch::NoGradGuard ng;
  const int64_t vocab = typed->options().vocab_size;
  const torch::Tensor x = torch::randint(vocab, {2, 4}, torch::kLong), y = torch::randint(vocab, {2, 4}, torch::kLong);
  const torch::Tensor out = typed->forward(x, y);
  CHECK(torch::equal(out, typed->forward(x, y)));  // eval mode: dropout 0.2 is off
  CHECK(torch::equal(out, named->forward(x, y)));
  CHECK(torch::equal(out, by_hand.forward(x, y)));
  demos::LanguageModel fresh(typed->options());
  fresh.configure_model();
  fresh.eval();
  CHECK_FALSE(torch::allclose(out, fresh.forward(x, y)));  // the weights are the trained ones
}

TEST_CASE("load_from_checkpoint: overrides win over the saved init args, unknown or invalid ones are refused",
          "[cli][load_from_checkpoint]") {
  const std::string dir = temp_dir("lfc-overrides");
  const std::string path = fit_language_model(dir);
  CLI cli;
  demos::register_demo(cli);
  auto base = load_from_checkpoint<demos::LanguageModel>(path);
  auto tuned = load_from_checkpoint<demos::LanguageModel>(path, YAML::Load("{dropout: 0.0, lr: 0.5}"));
  CHECK(tuned->options().dropout == 0.0);
  CHECK(tuned->options().lr == 0.5);
  CHECK(tuned->options().nhid == 8);
  auto named =
      std::dynamic_pointer_cast<demos::LanguageModel>(cli.load_from_checkpoint(path, YAML::Load("{lr: 0.25}")));
  REQUIRE(named);
  CHECK(named->options().lr == 0.25);
  CHECK(named->options().dropout == 0.2);
  {
    torch::NoGradGuard ng;
    const torch::Tensor x = torch::randint(base->options().vocab_size, {2, 4}, torch::kLong);
    CHECK(torch::equal(base->forward(x, x), tuned->forward(x, x)));
    CHECK(torch::equal(base->forward(x, x), named->forward(x, x)));
  }

  const YAML::Node unknown = YAML::Load("{nhidd: 16}");
  CHECK_THROWS_AS(load_from_checkpoint<demos::LanguageModel>(path, unknown), ConfigError);
  CHECK_THAT(error_of([&] { load_from_checkpoint<demos::LanguageModel>(path, unknown); }),
             Contains("unknown override 'nhidd'") && Contains("nhid"));
  CHECK_THAT(error_of([&] { cli.load_from_checkpoint(path, unknown); }), Contains("unknown override 'nhidd'"));
  CHECK_THROWS_AS(load_from_checkpoint<demos::LanguageModel>(path, YAML::Load("{lr: -1}")), ConfigError);
  CHECK_THAT(error_of([&] { load_from_checkpoint<demos::LanguageModel>(path, YAML::Load("{lr: -1}")); }),
             Contains("model.lr"));
  // An override that changes a shape no longer fits the weights.
  CHECK_THROWS_AS(load_from_checkpoint<demos::LanguageModel>(path, YAML::Load("{nhid: 16}")), CheckpointError);
}

TEST_CASE("load_from_checkpoint: a LlamaLM trained through the volt command under FSDP, sharded",
          "[cli][load_from_checkpoint][llm]") {
  const std::string dir = temp_dir("lfc-llama");
  const std::string fixture = small_fixture();
  std::ofstream(dir + "/llm.yaml") << "seed_everything: 3\n"
                                      "trainer:\n"
                                      "  max_steps: 2\n"
                                      "  devices: 1\n"
                                      "  strategy: {name: fsdp, state_dict_type: sharded}\n"
                                      "  enable_progress_bar: false\n"
                                      "  enable_model_summary: false\n"
                                      "  num_sanity_val_steps: 0\n"
                                      "  limit_val_batches: 0\n"
                                      "  default_root_dir: "
                                   << dir
                                   << "\n"
                                      "  callbacks: [{class_path: ModelCheckpoint, init_args: {save_last: true, "
                                      "every_n_train_steps: 1, dirpath: "
                                   << dir
                                   << "/ckpt}}]\n"
                                      "model:\n"
                                      "  class_path: LlamaLM\n"
                                      "  init_args: {hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2, "
                                      "num_attention_heads: 4, num_key_value_heads: 2, max_position_embeddings: 32, "
                                      "tie_word_embeddings: true, lr: 0.01}\n"
                                      "data:\n"
                                      "  class_path: TokenData\n"
                                      "  init_args: {data_dir: "
                                   << fixture << ", train_file: small.txt, val_file: small.txt, test_file: small.txt, "
                                   << "tokenizer: " << fixture << "/tok.model, cache_dir: " << dir
                                   << "/cache, block_size: 16, batch_size: 4}\n";
  const auto codes = run_processes({{VOLT_CLI, "fit", "--config", dir + "/llm.yaml"}}, {{}}, 300, dir + "/cli");
  INFO(read_text(dir + "/cli.0.log"));
  REQUIRE(codes[0] == 0);
  const std::string path = dir + "/ckpt/last.ckpt";
  REQUIRE(fs::is_directory(path));  // sharded

  auto typed = load_from_checkpoint<demos::LlamaLM>(path);
  CHECK_FALSE(typed->is_training());
  CHECK(typed->options().hidden_size == 32);
  CHECK(typed->options().vocab_size == 400);  // linked from the data when it was trained
  check_weights(*typed, path);
  CLI cli;
  demos::register_demo(cli);
  auto named = std::dynamic_pointer_cast<demos::LlamaLM>(cli.load_from_checkpoint(path));
  REQUIRE(named);
  torch::NoGradGuard ng;
  const torch::Tensor ids = torch::randint(400, {2, 16}, torch::kLong);
  const torch::Tensor logits = typed->forward(ids);
  CHECK(torch::equal(logits, named->forward(ids)));
  // The consolidated file gives the same module.
  consolidate_checkpoint(path, dir + "/full.ckpt");
  CHECK(torch::equal(logits, load_from_checkpoint<demos::LlamaLM>(dir + "/full.ckpt")->forward(ids)));

  // Another class's checkpoint.
  CHECK_THROWS_AS(load_from_checkpoint<demos::LanguageModel>(path), ConfigError);
  CHECK_THAT(error_of([&] { load_from_checkpoint<demos::LanguageModel>(path); }),
             Contains("volt::demos::LlamaLM") && Contains(path));
  CHECK_THAT(error_of([&] { cli.load_from_checkpoint(path, YAML::Node(), "LanguageModel"); }),
             Contains("'LlamaLM'") && Contains("not 'LanguageModel'"));
}

TEST_CASE("load_from_checkpoint: a foreign file, and checkpoints written without the CLI",
          "[cli][load_from_checkpoint]") {
  const std::string dir = temp_dir("lfc-foreign");
  SECTION("a safetensors file and a text file are not checkpoints") {
    Net<false> net;
    save_safetensors(net, dir + "/w.safetensors");
    CHECK_THROWS_AS(load_from_checkpoint<Net<false>>(dir + "/w.safetensors"), CheckpointError);
    CHECK_THAT(error_of([&] { load_from_checkpoint<Net<false>>(dir + "/w.safetensors"); }),
               Contains(dir + "/w.safetensors"));
    std::ofstream(dir + "/notes.txt") << "not a checkpoint\n";
    CHECK_THROWS_AS(load_from_checkpoint<Net<false>>(dir + "/notes.txt"), CheckpointError);
  }
  SECTION("hparams() gives the init args") {
    fit_net<Net<false>>(dir, dir + "/a.ckpt");
    auto m = load_from_checkpoint<Net<false>>(dir + "/a.ckpt");
    CHECK(m->fc->weight.size(0) == 6);
    check_weights(*m, dir + "/a.ckpt");
    CHECK_FALSE(m->is_training());
    CLI cli;
    cli.add_model<Net<false>>("Net");
    CHECK_THAT(error_of([&] { cli.load_from_checkpoint(dir + "/a.ckpt"); }), Contains("name the class"));
    auto named = cli.load_from_checkpoint(dir + "/a.ckpt", YAML::Node(), "Net");
    check_weights(*named, dir + "/a.ckpt");
    // A checkpoint saved by another C++ class.
    CHECK_THAT(error_of([&] { load_from_checkpoint<Net<true>>(dir + "/a.ckpt"); }),
               Contains("Net<false>, not a") && Contains("Net<true>"));
  }
  SECTION("a checkpoint without hyper_parameters is a clear error") {
    fit_net<Net<true>>(dir, dir + "/b.ckpt");
    CHECK_THROWS_AS(load_from_checkpoint<Net<true>>(dir + "/b.ckpt"), CheckpointError);
    CHECK_THAT(error_of([&] { load_from_checkpoint<Net<true>>(dir + "/b.ckpt"); }),
               Contains("holds no hyper_parameters") && Contains("volt::load_weights"));
  }
}
