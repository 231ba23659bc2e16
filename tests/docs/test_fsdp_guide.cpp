// The code in docs/fsdp.md, compiled and run as written: a unit (HookedModule) and the one-line
// strategy switch. If the guide's code stops compiling, this test stops building.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "volt/strategies/fsdp/fsdp_strategy.h"
#include "volt/volt.h"

namespace {

// ---- docs/fsdp.md, "Choosing units" (verbatim) ----
class Block : public volt::HookedModule {
 public:
  Block() : HookedModule("Block") { fc = register_module("fc", torch::nn::Linear(512, 512)); }
  torch::Tensor forward(const torch::Tensor& x) {
    return intercepted({x}, [this](const volt::TensorVec& in) { return torch::relu(fc->forward(in[0])); });
  }
  torch::nn::Linear fc{nullptr};
};
// ----

struct GuideModel : volt::LightningModule {
  GuideModel() : LightningModule("GuideModel") {
    a = register_module("a", std::make_shared<Block>());
    b = register_module("b", std::make_shared<Block>());
  }
  torch::Tensor training_step(const volt::Batch& batch, int64_t) override {
    return b->forward(a->forward(batch[0])).square().mean();
  }
  volt::Optimizers configure_optimizers() override {
    return {std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1))};
  }
  std::shared_ptr<Block> a, b;
};

}  // namespace

TEST_CASE("docs/fsdp.md: the guide's unit and strategy switch work as written", "[docs][fsdp]") {
  // ---- docs/fsdp.md, "When to use it" (verbatim, with the guide's layer types) ----
  volt::TrainerOptions o;
  o.devices = 2;
  o.strategy = "fsdp";
  o.strategy.fsdp.auto_wrap_policy.module_types = {"TransformerEncoderLayer", "TransformerDecoderLayer"};
  // ----
  CHECK(o.strategy.name == "fsdp");
  CHECK(o.strategy.fsdp.sharding_strategy == "FULL_SHARD");

  // The same policy form picks the guide's Block as FSDP units (one process, so it runs here).
  volt::FSDPOptions f;
  f.auto_wrap_policy.module_types = {"Block"};
  volt::FSDPStrategy s(volt::Precision("32-true", "cpu"), "cpu", 1, 1, f);
  s.setup_environment();
  GuideModel m;
  s.setup_module(m);
  REQUIRE(s.units().size() == 3);  // the root plus the two Blocks
  CHECK(s.units()[1].numel == 512 * 512 + 512);
  auto loss = s.training_step(m, {torch::randn({4, 512})}, 0);
  s.backward(m, loss, true);
  CHECK(std::isfinite(loss.item<double>()));
  s.teardown(m);
}
