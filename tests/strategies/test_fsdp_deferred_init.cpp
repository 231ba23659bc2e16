// Deferred initialization: LightningModule::wrap() in configure_model() shards each unit as it is
// built, so the layers built before it hold no storage of their own any more (in-process, world 1).
#include <catch2/catch.hpp>

#include "boring_model.h"
#include "volt/core/compat.h"
#include "volt/core/errors.h"
#include "volt/core/hooked_wrapper.h"
#include "volt/strategies/fsdp/fsdp_strategy.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;

namespace {
/// Builds `n` wrapped Linear layers in configure_model(); after each wrap() records how many bytes
/// of storage the earlier layers' weights still hold. `misuse` picks a wrong use of wrap().
class LayerStack : public LightningModule {
 public:
  explicit LayerStack(std::string misuse = "") : LightningModule("LayerStack"), misuse_(std::move(misuse)) {}
  void configure_model() override {
    if (layers) return;
    layers = register_module("layers", torch::nn::ModuleList());
    for (int i = 0; i < 3; ++i) {
      auto l = wrap(hooked(torch::nn::Linear(32, 32)));
      if (misuse_ == "twice") wrap(l);
      layers->push_back(l);
      int64_t held = 0;
      for (size_t k = 0; k + 1 < layers->size(); ++k)
        held += static_cast<int64_t>(
            compat::storage_nbytes(layers[k]->as<HookedImpl<torch::nn::Linear>>()->inner()->weight));
      held_after_wrap.push_back(held);
    }
    if (misuse_ == "plain") wrap(torch::nn::Linear(2, 2));
    if (misuse_ == "unregistered") wrap(hooked(torch::nn::Linear(32, 32)));
    head = register_module("head", hooked(torch::nn::Linear(32, 2)));
  }
  torch::Tensor training_step(const Batch& b, int64_t) override {
    torch::Tensor x = b[0];
    for (const auto& l : *layers) x = torch::tanh(l->as<HookedImpl<torch::nn::Linear>>()->forward(x));
    auto out = head->forward(x);
    return torch::mse_loss(out, torch::ones_like(out));
  }
  Optimizers configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1));
  }
  torch::nn::ModuleList layers{nullptr};
  Hooked<torch::nn::Linear> head{nullptr};
  std::vector<int64_t> held_after_wrap;

 private:
  std::string misuse_;
};

TrainerOptions fsdp_options(const std::string& tag, bool fsdp) {
  TrainerOptions o = quiet_options(temp_dir(tag));
  o.max_steps = 2;
  if (fsdp) {
    o.strategy = "fsdp";
    o.strategy.fsdp.auto_wrap_policy.module_types = {"Linear"};
  }
  return o;
}
}  // namespace

TEST_CASE("wrap() in configure_model shards each unit as it is built, with single-process values", "[fsdp][deferred]") {
  DataLoader la(std::make_shared<RandomDataset>(16), DataLoaderOptions{8, false, false, 0});
  DataLoader lb(std::make_shared<RandomDataset>(16), DataLoaderOptions{8, false, false, 0});
  torch::manual_seed(4);
  LayerStack single;
  Trainer ta(fsdp_options("deferred-single", false));
  ta.fit(single, la);
  // One device: wrap() changes nothing; every layer keeps its 32 x 32 floats.
  CHECK(single.held_after_wrap == std::vector<int64_t>{0, 4096, 8192});

  torch::manual_seed(4);
  LayerStack sharded;
  Trainer tb(fsdp_options("deferred-fsdp", true));
  tb.fit(sharded, lb);
  // FSDP: a wrapped layer's parameters live only in its shard from the moment it is wrapped.
  CHECK(sharded.held_after_wrap == std::vector<int64_t>{0, 0, 0});
  auto* fsdp = dynamic_cast<FSDPStrategy*>(&tb.strategy());
  REQUIRE(fsdp != nullptr);
  auto a = ta.strategy().model_state_dict(single), b = tb.strategy().model_state_dict(sharded);
  REQUIRE(a.size() == b.size());
  for (auto& [k, v] : a) CHECK(torch::allclose(v, b.at(k), 1e-6, 1e-6));
}

TEST_CASE("wrap() misuse is a ConfigError that says what to do", "[fsdp][deferred][config]") {
  for (std::string misuse : {"twice", "plain", "unregistered"}) {
    DYNAMIC_SECTION(misuse) {
      DataLoader l(std::make_shared<RandomDataset>(16), DataLoaderOptions{8, false, false, 0});
      LayerStack m(misuse);
      Trainer t(fsdp_options("deferred-" + misuse, true));
      const char* says = misuse == "twice" ? "twice" : misuse == "plain" ? "volt::hooked" : "not part of the model";
      CHECK_THROWS_AS(t.fit(m, l), ConfigError);
      LayerStack m2(misuse);
      Trainer t2(fsdp_options("deferred2-" + misuse, true));
      CHECK_THROWS_WITH(t2.fit(m2, l), Catch::Contains(says));
    }
  }
}
