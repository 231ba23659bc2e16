// Choice<E>: enum-valued options spelled as Lightning spells them, validated once with the key.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "volt/core/options.h"
#include "volt/strategies/strategy_options.h"

using namespace volt;
using Catch::Matchers::Contains;

TEST_CASE("Choice keeps the spelling, normalizes it on validate and compares as text or enum", "[unit][options]") {
  Choice<ShardingStrategy> c = "shard_grad_op";
  CHECK(c == "shard_grad_op");  // as given until validated
  c.validate("trainer.strategy.sharding_strategy");
  CHECK(c == "SHARD_GRAD_OP");
  CHECK(c == ShardingStrategy::ShardGradOp);
  CHECK(c != ShardingStrategy::FullShard);
  CHECK(c.value() == ShardingStrategy::ShardGradOp);
  Choice<ShardingStrategy> d = ShardingStrategy::HybridShardZero2;
  CHECK(d.text() == "_HYBRID_SHARD_ZERO2");
  Choice<BackwardPrefetch> none = "";
  none.validate("k");
  CHECK(none == BackwardPrefetch::None);
  Choice<StateDictType> sd = "SHARDED";
  sd.validate("k");
  CHECK(sd.text() == "sharded");
}

TEST_CASE("Choice: an unknown spelling names the key and the valid values", "[unit][options]") {
  Choice<StateDictType> c = "weird";
  CHECK(c != StateDictType::Full);  // comparing never throws
  try {
    c.validate("trainer.strategy.state_dict_type");
    FAIL("validated");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()) ==
          "config key 'trainer.strategy.state_dict_type': unknown value 'weird'; valid: full, sharded");
  }
  CHECK_THROWS_WITH(c.value(), "unknown value 'weird'; valid: full, sharded");
}

TEST_CASE("Choice maps onto YAML as its text", "[unit][options]") {
  const auto node = volt::detail::YamlCodec<Choice<GradientClipAlgorithm>>::encode(GradientClipAlgorithm::Value);
  CHECK(node.as<std::string>() == "value");
  const auto back =
      volt::detail::YamlCodec<Choice<GradientClipAlgorithm>>::decode(node, "trainer.gradient_clip_algorithm");
  CHECK(back == GradientClipAlgorithm::Value);
  CHECK_THROWS_AS(volt::detail::YamlCodec<Choice<GradientClipAlgorithm>>::decode(YAML::Load("[1]"), "k"), ConfigError);
}
