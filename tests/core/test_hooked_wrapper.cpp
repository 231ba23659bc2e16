#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "volt/core/hooked_wrapper.h"
#include "volt/strategies/module_policy.h"

using namespace volt;

namespace {
/// Counts calls around the forward it wraps.
class Counter : public ForwardInterceptor {
 public:
  torch::Tensor around(torch::nn::Module&, const TensorVec& inputs, const ForwardFn& next) override {
    ++calls;
    return next(inputs);
  }
  const char* name() const override { return "counter"; }
  int calls = 0;
};
}  // namespace

TEST_CASE("volt::hooked wraps a stock layer without changing its names, values or forward", "[core][hooked]") {
  torch::manual_seed(5);
  auto opts = torch::nn::TransformerEncoderLayerOptions(8, 2).dim_feedforward(16).dropout(0.0);
  torch::nn::TransformerEncoderLayer plain(opts);
  auto wrapped = hooked(plain);  // shares plain's parameters
  auto pn = plain->named_parameters(), wn = wrapped->named_parameters();
  REQUIRE(pn.size() == wn.size());
  for (const auto& kv : pn) {
    REQUIRE(wn.contains(kv.key()));
    CHECK(wn[kv.key()].is_same(kv.value()));
  }
  CHECK(wrapped->name() == plain->name());
  CHECK(short_type_name(wrapped->name()) == "TransformerEncoderLayer");

  torch::Tensor x = torch::randn({3, 2, 8});
  torch::Tensor mask = torch::zeros({3, 3});
  CHECK(torch::equal(wrapped->forward(x), plain->forward(x)));
  CHECK(torch::equal(wrapped->forward(x, mask), plain->forward(x, mask)));

  auto counter = std::make_shared<Counter>();
  wrapped->add_interceptor(counter);
  wrapped->forward(x);
  CHECK(counter->calls == 1);

  // Training mode reaches the inner module itself, not only the children it shares.
  wrapped->eval();
  CHECK_FALSE(plain->is_training());
  wrapped->train();
  CHECK(plain->is_training());

  // Inside a parent, the names are the unwrapped ones.
  torch::nn::Module parent;
  auto list = parent.register_module("layers", torch::nn::ModuleList());
  list->push_back(wrapped);
  CHECK(parent.named_parameters().contains("layers.0.self_attn.in_proj_weight"));
  CHECK(parent.named_parameters().contains("layers.0.linear1.weight"));
}

TEST_CASE("policies select wrapped stock layers by their short type name", "[core][hooked]") {
  torch::nn::Module root;
  auto list = root.register_module("layers", torch::nn::ModuleList());
  list->push_back(hooked(torch::nn::Linear(4, 4)));
  list->push_back(torch::nn::Linear(4, 4));
  ModulePolicy p;
  p.module_types = {"Linear"};
  // The plain Linear is selected too, and cannot be acted on: a ConfigError saying how to wrap it.
  CHECK_THROWS_WITH(select_modules(root, p, "k", "FSDP"), Catch::Contains("volt::hooked"));
  torch::nn::Module ok;
  auto l2 = ok.register_module("layers", torch::nn::ModuleList());
  l2->push_back(hooked(torch::nn::Linear(4, 4)));
  auto picked = select_modules(ok, p, "k", "FSDP");
  REQUIRE(picked.size() == 1);
  CHECK(picked[0].first == "layers.0");
}
