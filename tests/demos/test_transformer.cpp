// The demo Transformer against PyTorch: parameter names/shapes, loss and gradients for the same
// weights (golden from tests/golden/make_demo_golden.py), interception, precision.
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>

#include "volt/core/compat.h"
#include "volt/core/errors.h"
#include "volt/core/hooked_module.h"
#include "volt/core/options.h"
#include "volt/demos/transformer.h"

using volt::demos::Transformer;
using volt::demos::TransformerOptions;

namespace {

const std::string kGolden = std::string(VOLT_SOURCE_DIR) + "/tests/golden/";

struct Golden {
  YAML::Node meta;
  std::map<std::string, torch::Tensor> tensors;
  TransformerOptions options;
  torch::Tensor get(const std::string& key) const {
    auto it = tensors.find(key);
    REQUIRE(it != tensors.end());
    return it->second;
  }
};

const Golden& golden() {
  static const Golden g = [] {
    Golden out;
    out.meta = YAML::LoadFile(kGolden + "demo_transformer.json");
    std::ifstream in(kGolden + "demo_transformer.pt", std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    REQUIRE(!bytes.empty());
    for (const auto& kv : torch::pickle_load(bytes).toGenericDict())
      out.tensors[kv.key().toStringRef()] = kv.value().toTensor();
    const auto c = out.meta["config"];
    out.options.vocab_size = c["vocab_size"].as<int64_t>();
    out.options.ninp = c["ninp"].as<int64_t>();
    out.options.nhead = c["nhead"].as<int64_t>();
    out.options.nhid = c["nhid"].as<int64_t>();
    out.options.nlayers = c["nlayers"].as<int64_t>();
    out.options.dropout = c["dropout"].as<double>();
    return out;
  }();
  return g;
}

/// A small Transformer holding PyTorch's weights.
std::shared_ptr<Transformer> golden_model() {
  const auto& g = golden();
  auto model = std::make_shared<Transformer>(g.options);
  torch::NoGradGuard ng;
  for (auto& p : model->named_parameters()) p.value().copy_(g.get("param." + p.key()));
  model->eval();
  return model;
}

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

/// Counts calls and checks what a layer hands to its interceptors.
struct CountingInterceptor : volt::ForwardInterceptor {
  int calls = 0;
  std::vector<size_t> input_counts;
  bool all_defined = true;  // every activation input; the encoder's mask is undefined (nn.Transformer passes none)
  torch::Tensor around(torch::nn::Module& m, const volt::TensorVec& inputs, const volt::ForwardFn& next) override {
    ++calls;
    input_counts.push_back(inputs.size());
    const size_t n = m.name() == "TransformerEncoderLayer" ? 1 : inputs.size();
    for (size_t i = 0; i < n; ++i) all_defined = all_defined && inputs[i].defined();
    return next(inputs);
  }
  const char* name() const override { return "counting"; }
};

}  // namespace

TEST_CASE("demo Transformer: parameter names, order and shapes are PyTorch's", "[demos][transformer]") {
  const auto& g = golden();
  Transformer model(g.options);
  const auto names = g.meta["param_names"].as<std::vector<std::string>>();
  const auto shapes = g.meta["param_shapes"].as<std::vector<std::vector<int64_t>>>();
  const auto params = model.named_parameters();
  REQUIRE(params.size() == names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    INFO("parameter " << i);
    CHECK(params[i].key() == names[i]);
    CHECK(params[i].value().sizes().vec() == shapes[i]);
  }
  CHECK(model.named_buffers().size() == 0);  // the positional table is not in the state_dict
}

TEST_CASE("demo Transformer: the default configuration has PyTorch's parameter count", "[demos][transformer]") {
  Transformer model;
  const auto& opt = model.options();
  CHECK(opt.vocab_size == 33278);
  CHECK(opt.ninp == 200);
  CHECK(opt.nhead == 2);
  CHECK(opt.nhid == 200);
  CHECK(opt.nlayers == 2);
  CHECK(opt.dropout == 0.2);
  int64_t n = 0;
  for (const auto& p : model.parameters()) n += p.numel();
  CHECK(n == golden().meta["default_num_params"].as<int64_t>());
  CHECK(static_cast<int64_t>(model.parameters().size()) == golden().meta["default_num_param_tensors"].as<int64_t>());
}

TEST_CASE("demo Transformer: initialization follows PyTorch's", "[demos][transformer]") {
  torch::manual_seed(0);
  TransformerOptions o;
  o.vocab_size = 100;
  o.ninp = 64;
  o.nhid = 128;
  Transformer model(o);
  for (const auto& p : model.named_parameters()) {
    const auto& name = p.key();
    const auto& t = p.value();
    INFO(name);
    if (name.rfind("transformer.", 0) == 0 && t.dim() > 1) {
      // xavier_uniform_: bound sqrt(6 / (fan_in + fan_out))
      const double bound = std::sqrt(6.0 / static_cast<double>(t.size(0) + t.size(1)));
      CHECK(t.abs().max().item<double>() <= bound);
      CHECK(t.abs().max().item<double>() > 0.8 * bound);
    }
    if (name.find("in_proj_bias") != std::string::npos || name.find("out_proj.bias") != std::string::npos)
      CHECK(t.abs().max().item<double>() == 0.0);
    if (name.find("norm") != std::string::npos && name.find(".weight") != std::string::npos)
      CHECK(torch::all(t == 1).item<bool>());
  }
  // Embedding ~ N(0, 1).
  CHECK(std::abs(model.embedding->inner()->weight.std().item<double>() - 1.0) < 0.05);
}

TEST_CASE("demo Transformer: built unit by unit, it has the same values and leaves the generator the same",
          "[demos][transformer][deferred]") {
  TransformerOptions o;
  o.vocab_size = 50;
  o.ninp = 16;
  o.nhead = 2;
  o.nhid = 24;
  o.nlayers = 3;
  torch::manual_seed(21);
  Transformer whole(o);
  const torch::Tensor after_whole = torch::rand({4});
  torch::manual_seed(21);
  std::vector<std::string> order;
  Transformer parts(o, [&](torch::nn::Module& m) {
    order.push_back(m.name());
    // Handed over complete: initialised, with its final values (checked below).
    for (const auto& p : m.parameters()) CHECK(p.numel() > 0);
  });
  const torch::Tensor after_parts = torch::rand({4});
  CHECK(torch::equal(after_whole, after_parts));
  const std::vector<std::string> expected = {
      "torch::nn::EmbeddingImpl", "TransformerEncoderLayer", "TransformerEncoderLayer", "TransformerEncoderLayer",
      "TransformerDecoderLayer",  "TransformerDecoderLayer", "TransformerDecoderLayer", "torch::nn::LinearImpl"};
  CHECK(order == expected);
  auto a = whole.named_parameters(), b = parts.named_parameters();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].key());
    CHECK(a[i].key() == b[i].key());  // same names, same order
    CHECK(torch::equal(a[i].value(), b[i].value()));
  }
}

TEST_CASE("demo Transformer: loss and gradients match PyTorch in fp32", "[demos][transformer][parity]") {
  const auto& g = golden();
  auto model = golden_model();
  const auto inputs = g.get("inputs"), target = g.get("target");
  auto output = model->forward(inputs, target);
  auto loss = torch::nll_loss(output, target.reshape({-1}));
  loss.backward();

  const double loss_diff = std::abs(loss.item<double>() - g.get("loss").item<double>());
  const double out_diff = max_abs_diff(output, g.get("output"));
  double grad_diff = 0.0;
  for (auto& p : model->named_parameters())
    grad_diff = std::max(grad_diff, max_abs_diff(p.value().grad(), g.get("grad." + p.key())));
  WARN("parity with PyTorch: |loss diff| = " << loss_diff << ", max |output diff| = " << out_diff
                                             << ", max |grad diff| = " << grad_diff);
  CHECK(loss_diff < 1e-5);
  CHECK(out_diff < 1e-5);
  CHECK(grad_diff < 1e-5);
  CHECK(std::abs(loss.item<double>() - g.meta["loss"].as<double>()) < 1e-5);
}

TEST_CASE("demo Transformer: the default mask is causal", "[demos][transformer]") {
  auto m = Transformer::generate_square_subsequent_mask(3);
  CHECK(m.scalar_type() == torch::kFloat);
  CHECK(m[0][0].item<float>() == 0.0f);
  CHECK(m[1][0].item<float>() == 0.0f);
  CHECK(std::isinf(m[0][1].item<float>()));
  CHECK(m[0][1].item<float>() < 0);
  // Passing the default mask explicitly gives the same output.
  const auto& g = golden();
  auto model = golden_model();
  torch::NoGradGuard ng;
  const auto inputs = g.get("inputs"), target = g.get("target");
  auto a = model->forward(inputs, target);
  auto b = model->forward(inputs, target, Transformer::generate_square_subsequent_mask(inputs.size(1)));
  CHECK(torch::equal(a, b));
}

TEST_CASE("demo Transformer: encoder and decoder layers are HookedModules", "[demos][transformer]") {
  auto model = golden_model();
  const auto nlayers = golden().options.nlayers;
  const auto layers = model->layers();
  REQUIRE(static_cast<int64_t>(layers.size()) == 2 * nlayers);
  for (int64_t i = 0; i < 2 * nlayers; ++i) {
    CHECK(volt::is_hooked(*layers[i]));
    CHECK(layers[i]->name() == (i < nlayers ? "TransformerEncoderLayer" : "TransformerDecoderLayer"));
  }
  // Found by a strategy walking the module tree, too.
  int64_t hooked = 0;
  for (const auto& m : model->modules(/*include_self=*/true))
    if (volt::is_hooked(*m)) ++hooked;
  CHECK(hooked == 2 * nlayers + 2);  // and the stock embedding and output layer, wrapped (volt::hooked)
  CHECK(model->transformer->encoder->layers[0]->name() == "TransformerEncoderLayer");
  CHECK(model->transformer->decoder->layers[0]->name() == "TransformerDecoderLayer");
}

TEST_CASE("demo Transformer: interceptors see every layer's forward and change nothing", "[demos][transformer]") {
  const auto& g = golden();
  auto model = golden_model();
  const auto inputs = g.get("inputs"), target = g.get("target");
  torch::Tensor plain;
  {
    torch::NoGradGuard ng;
    plain = model->forward(inputs, target);
  }
  auto counter = std::make_shared<CountingInterceptor>();
  for (auto& layer : model->layers()) layer->add_interceptor(counter);
  torch::Tensor hooked;
  {
    torch::NoGradGuard ng;
    hooked = model->forward(inputs, target);
  }
  const auto nlayers = g.options.nlayers;
  CHECK(counter->calls == 2 * nlayers);
  CHECK(counter->all_defined);
  for (int64_t i = 0; i < 2 * nlayers; ++i) CHECK(counter->input_counts[i] == (i < nlayers ? 2u : 3u));
  CHECK(torch::equal(plain, hooked));
  for (auto& layer : model->layers()) CHECK(layer->remove_interceptors("counting") == 1);
}

TEST_CASE("demo Transformer: dropout follows the training flag", "[demos][transformer]") {
  const auto& g = golden();
  auto model = golden_model();
  const auto inputs = g.get("inputs"), target = g.get("target");
  torch::NoGradGuard ng;
  CHECK(torch::equal(model->forward(inputs, target), model->forward(inputs, target)));
  model->train();
  CHECK(model->transformer->decoder->layers[0]->self_attn->is_training());
  CHECK_FALSE(torch::equal(model->forward(inputs, target), model->forward(inputs, target)));
}

TEST_CASE("demo Transformer: runs under bf16 autocast and in bf16", "[demos][transformer][precision]") {
  const auto& g = golden();
  const auto inputs = g.get("inputs"), target = g.get("target");
  const double ref = g.get("loss").item<double>();
  {
    auto model = golden_model();
    volt::compat::set_cpu_autocast(true, torch::kBFloat16);
    torch::Tensor loss;
    try {
      loss = torch::nll_loss(model->forward(inputs, target), target.reshape({-1}));
    } catch (...) {
      volt::compat::set_cpu_autocast(false, torch::kBFloat16);
      throw;
    }
    volt::compat::set_cpu_autocast(false, torch::kBFloat16);
    volt::compat::clear_autocast_cache();
    loss.backward();
    CHECK(std::abs(loss.item<double>() - ref) < 0.05);
    CHECK(torch::isfinite(model->embedding->inner()->weight.grad()).all().item<bool>());
  }
  {
    auto model = golden_model();
    model->to(torch::kBFloat16);
    auto loss = torch::nll_loss(model->forward(inputs, target), target.reshape({-1}));
    loss.backward();
    CHECK(loss.scalar_type() == torch::kBFloat16);
    CHECK(std::abs(loss.item<double>() - ref) < 0.1);
    CHECK(torch::isfinite(model->decoder->inner()->weight.grad()).all().item<bool>());
  }
}

TEST_CASE("demo Transformer: options map to YAML and are validated", "[demos][transformer][config]") {
  TransformerOptions o;
  auto node = volt::options_to_yaml(o);
  CHECK(node["vocab_size"].as<int64_t>() == 33278);
  CHECK(node["dropout"].as<double>() == 0.2);
  auto back = volt::options_from_yaml<TransformerOptions>(YAML::Load("{ninp: 64, nhead: 4}"), "model");
  CHECK(back.ninp == 64);
  CHECK(back.nhead == 4);
  CHECK(back.nlayers == 2);

  auto error_of = [](TransformerOptions bad) -> std::string {
    try {
      bad.validate();
    } catch (const volt::ConfigError& e) {
      return e.what();
    }
    return "";
  };
  TransformerOptions bad;
  bad.nhead = 3;  // 200 % 3 != 0
  CHECK_THAT(error_of(bad), Catch::Contains("model.nhead"));
  bad = {};
  bad.ninp = 15;
  CHECK_THAT(error_of(bad), Catch::Contains("model.ninp"));
  bad = {};
  bad.dropout = 1.0;
  CHECK_THAT(error_of(bad), Catch::Contains("model.dropout"));
  bad = {};
  bad.nlayers = 0;
  CHECK_THAT(error_of(bad), Catch::Contains("model.nlayers"));
  bad = {};
  bad.vocab_size = 0;
  CHECK_THAT(error_of(bad), Catch::Contains("model.vocab_size"));
  bad.vocab_size = 0;
  CHECK_THROWS_AS(Transformer(bad), volt::ConfigError);
}
