// Parameter counts by shape (while FSDP holds the model sharded too) and torchtitan's FLOPs per
// token (profiler/model_flops.h), which bench/gpu/bench_gpu.cpp reports MFU with.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "boring_model.h"
#include "volt/core/hooked_wrapper.h"
#include "volt/demos/language_model.h"
#include "volt/profiler/model_flops.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;

TEST_CASE("count_parameters: the demo Transformer by shape, its embedding apart", "[profiler][flops]") {
  demos::LanguageModelOptions mo;
  mo.vocab_size = 50;
  mo.ninp = 8;
  mo.nhead = 2;
  mo.nhid = 16;
  mo.nlayers = 2;
  demos::LanguageModel m(mo);
  m.configure_model();
  const int64_t E = 8, V = 50, H = 16;
  const int64_t attention = 3 * E * E + 3 * E + E * E + E;
  const int64_t ffn = H * E + H + E * H + E;
  const int64_t encoder_layer = attention + ffn + 2 * 2 * E, decoder_layer = 2 * attention + ffn + 3 * 2 * E;
  const int64_t expected = V * E + 2 * encoder_layer + 2 * decoder_layer + 2 * 2 * E + (E * V + V);
  int64_t listed = 0;
  for (const auto& p : m.parameters()) listed += p.numel();
  const ParameterCount c = count_parameters(m);
  CHECK(c.total == expected);
  CHECK(c.total == listed);
  CHECK(c.embedding == V * E);  // the shared embedding, inside volt::hooked(...)
  CHECK(c.non_embedding() == expected - V * E);
}

TEST_CASE("count_parameters: a weight tied to an output layer counts once, as a matmul's", "[profiler][flops]") {
  /// An output projection over the embedding's own weight (a matmul with it).
  struct Head : torch::nn::Module {
    explicit Head(const torch::Tensor& w) { weight = register_parameter("weight", w); }
    torch::Tensor weight;
  };
  struct Tied : torch::nn::Module {
    Tied() {
      emb = register_module("emb", torch::nn::Embedding(10, 4));
      out = register_module("out", std::make_shared<Head>(emb->weight));
    }
    torch::nn::Embedding emb{nullptr};
    std::shared_ptr<Head> out;
  } tied;
  struct Untied : torch::nn::Module {
    Untied() {
      emb = register_module("emb", hooked(torch::nn::Embedding(10, 4)));
      out = register_module("out", torch::nn::Linear(4, 10));
    }
    std::shared_ptr<torch::nn::Module> emb;
    torch::nn::Linear out{nullptr};
  } untied;
  const ParameterCount t = count_parameters(tied), u = count_parameters(untied);
  CHECK(t.total == 40);
  CHECK(t.embedding == 0);
  CHECK(u.total == 40 + 40 + 10);
  CHECK(u.embedding == 40);
}

TEST_CASE("count_parameters under FSDP: right from on_train_start on, not after fit", "[profiler][flops][fsdp]") {
  struct Counter : Callback {
    std::string state_key() const override { return "Counter"; }
    void on_train_start(Trainer&, LightningModule& m) override { at_start = count_parameters(m).total; }
    int64_t at_start = -1;
  };
  BoringOptions bo;
  bo.blocks = 3;
  bo.hidden = 33;
  auto model = std::make_shared<BoringModel>(bo);
  BoringModel& m = *model;
  const int64_t before = count_parameters(m).total;
  CHECK(before == 32 * 33 + 33 + 2 * (33 * 33 + 33) + 33 * 2 + 2);
  auto o = quiet_options(temp_dir("flops-fsdp"));
  o.strategy = "fsdp";
  o.strategy.fsdp.auto_wrap_policy.module_types = {"Block"};
  auto counter = std::make_shared<Counter>();
  DataLoader loader(std::make_shared<RandomDataset>(16), DataLoaderOptions{8, false, false, 0});
  Trainer t(o, {counter});
  t.fit(m, loader);
  CHECK(counter->at_start == before);
  // After fit the module stays sharded: its parameters are empty tensors (what bench_gpu used to
  // count, reporting 0 parameters and 0 MFU).
  CHECK(count_parameters(m).total == 0);
}

TEST_CASE("flops_per_token is torchtitan's 6N + 12 l h q t", "[profiler][flops]") {
  CHECK(flops_per_token(1000, 2, 4, 8, 16) == 6000.0 + 12.0 * 2 * 4 * 8 * 16);
  // The 841 M shape of docs/gpu.md (ninp 2048, nhead 16, 6 + 6 layers) at block 2048: encoder self-,
  // decoder self- and cross-attention make 18 attention blocks of 16 heads of width 128. Against 6N
  // with the embedding, as bench_gpu used to count: about 10% more FLOPs a token.
  const int64_t n = 841384446, embedding = 33278 * 2048;
  const double f = flops_per_token(n - embedding, 18, 16, 128, 2048);
  CHECK(f == 6.0 * (n - embedding) + 12.0 * 18 * 16 * 128 * 2048);
  CHECK(f / (6.0 * n) == Approx(1.0985).epsilon(1e-4));
}
