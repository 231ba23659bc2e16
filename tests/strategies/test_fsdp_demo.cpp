// FSDP on the demo Transformer (WikiText-2, through the CLI): after the same steps on the same
// global batches, every sharding strategy validates to the same loss (averaged over ranks) as
// single-process training and DDP: the same parameters, seen through the model's outputs.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "cli/cli_support.h"

using namespace volt::testing;

TEST_CASE("FSDP trains the demo Transformer like single-process training and DDP", "[fsdp][demos][multirank]") {
  if (!have_demo_data()) {
    WARN("WikiText-2 not found beside the repository: skipped");
    return;
  }
  const std::string layers = "{module_types: [TransformerEncoderLayer, TransformerDecoderLayer]}";
  // tiny.yaml: batch 8 per rank. Single process with the global batch sees the same samples a step.
  auto run = [&](int devices, int batch, const std::string& strategy) {
    return metrics_column(
        demo_fit(temp_dir("fsdp-demo"), {"--trainer.max_steps=6", "--trainer.devices=" + std::to_string(devices),
                                         "--data.batch_size=" + std::to_string(batch), "--trainer.strategy=" + strategy,
                                         "--trainer.gradient_clip_val=0.5", "--trainer.val_check_interval=3",
                                         "--trainer.limit_val_batches=4"}),
        "val_loss");
  };
  struct Case {
    std::string name;
    int devices;
    std::string strategy;
  };
  const std::vector<Case> cases = {
      {"DDP, 2 ranks", 2, "ddp"},
      {"FULL_SHARD, 2 ranks", 2, "{name: fsdp, sharding_strategy: FULL_SHARD, auto_wrap_policy: " + layers + "}"},
      {"SHARD_GRAD_OP, 2 ranks", 2, "{name: fsdp, sharding_strategy: SHARD_GRAD_OP, auto_wrap_policy: " + layers + "}"},
      {"FULL_SHARD, 4 ranks", 4, "{name: fsdp, sharding_strategy: FULL_SHARD, auto_wrap_policy: " + layers + "}"},
      {"HYBRID_SHARD 2x2", 4,
       "{name: fsdp, sharding_strategy: HYBRID_SHARD, device_mesh: [2, 2], auto_wrap_policy: " + layers + "}"},
  };
  std::map<int, std::vector<double>> single;
  for (int w : {2, 4}) single[w] = run(1, 8 * w, "single_device");
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.name) {
      auto losses = run(c.devices, 8, c.strategy);
      const auto& ref = single.at(c.devices);
      REQUIRE(losses.size() == ref.size());
      REQUIRE(losses.size() == 2);  // after steps 3 and 6
      for (size_t i = 0; i < ref.size(); ++i) CHECK(losses[i] == Approx(ref[i]).epsilon(1e-4));
    }
  }
}
