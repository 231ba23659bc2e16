// LightningModule::wrap reaches the running strategy through the WrapHost the Trainer attaches
// (module/ includes neither strategies/ nor trainer/); without one it checks the module and returns it.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "boring_model.h"
#include "volt/core/errors.h"
#include "volt/core/hooked_wrapper.h"
#include "volt/strategies/strategy.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;

namespace {

/// Records every module the strategy is asked to wrap, in order.
class RecordingStrategy : public SingleDeviceStrategy {
 public:
  explicit RecordingStrategy(std::vector<std::string>* log)
      : SingleDeviceStrategy(Precision("32-true", "cpu"), "cpu"), log_(log) {}
  void wrap(torch::nn::Module& unit) override { log_->push_back(unit.name()); }

 private:
  std::vector<std::string>* log_;
};

/// Builds one extra layer in configure_model and wraps it.
class WrappingModel : public BoringModel {
 public:
  void configure_model() override {
    if (!extra) extra = register_module("extra", wrap(volt::hooked(torch::nn::Linear(32, 32))));
  }
  Hooked<torch::nn::Linear> extra{nullptr};
};

}  // namespace

TEST_CASE("wrap() hands the module to the running strategy through the Trainer", "[module][wrap]") {
  std::vector<std::string> wrapped;
  WrappingModel m;
  // Outside a Trainer: nothing to hand it to, the module comes back unchanged.
  auto alone = m.wrap(volt::hooked(torch::nn::Linear(2, 2)));
  CHECK(alone->inner()->options.in_features() == 2);
  CHECK(wrapped.empty());
  // A module that is not a HookedModule is refused whoever runs it.
  CHECK_THROWS_AS(m.wrap(torch::nn::Linear(2, 2)), ConfigError);

  TrainerOptions o = quiet_options(temp_dir("wrap-host"));
  o.max_steps = 1;
  Trainer t(o, std::make_unique<RecordingStrategy>(&wrapped));
  DataLoader loader(std::make_shared<RandomDataset>(8), DataLoaderOptions{.batch_size = 4});
  t.fit(m, loader);
  REQUIRE(wrapped.size() == 1);  // the extra layer, once
  CHECK_THAT(wrapped[0], Catch::Matchers::Contains("Linear"));
  REQUIRE(m.extra);
  CHECK(m.extra->inner()->options.in_features() == 32);
}
