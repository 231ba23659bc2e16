#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <limits>
#include <string>

#include "gpu_visibility.h"
#include "volt/core/errors.h"
#include "volt/core/options.h"
#include "volt/strategies/precision.h"
#include "volt/trainer/trainer.h"
#include "volt/trainer/trainer_options.h"

using namespace volt;

namespace {

/// Parses the `trainer:` section of a YAML document as the CLI does.
TrainerOptions parse_trainer(const std::string& yaml) {
  const YAML::Node root = YAML::Load(yaml);
  return options_from_yaml<TrainerOptions>(root["trainer"], "trainer");
}

/// Runs f, expects a ConfigError and returns its message (fails the test otherwise).
template <class F>
std::string config_error(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("expected a ConfigError, got another exception: " << e.what());
  }
  FAIL("expected a ConfigError, nothing was thrown");
  return {};
}

using Catch::Matchers::Contains;

}  // namespace

TEST_CASE("TrainerOptions defaults are Lightning's", "[options]") {
  // Both a default-constructed struct and an empty/missing YAML section give Lightning's defaults.
  for (const TrainerOptions& o :
       {TrainerOptions{}, parse_trainer("trainer: {}"), parse_trainer("model: {x: 1}"), parse_trainer("trainer:")}) {
    CHECK(o.log_every_n_steps == 50);
    CHECK(o.num_sanity_val_steps == 2);
    CHECK(o.accumulate_grad_batches == 1);
    CHECK(o.precision == "32-true");
    CHECK(o.strategy.name == "auto");
    CHECK(o.gradient_clip_algorithm == "norm");
    CHECK_FALSE(o.gradient_clip_val.has_value());
    CHECK_FALSE(o.max_epochs.has_value());  // Lightning's None: 1000 epochs unless max_steps is set
    CHECK(o.effective_max_epochs() == 1000);
    CHECK(o.max_steps == -1);
    // Lightning's accelerator="auto", devices="auto": resolved when validated.
    CHECK(o.accelerator == "auto");
    CHECK(o.devices.is_auto());
    CHECK(o.num_nodes == 1);
    CHECK_FALSE(o.min_epochs.has_value());
    CHECK_FALSE(o.min_steps.has_value());
    CHECK(o.inference_mode);
    CHECK(o.reload_dataloaders_every_n_epochs == 0);
    CHECK(o.plugins.empty());
    CHECK(o.check_val_every_n_epoch == 1);
    CHECK(o.limit_train_batches == BatchLimit::fraction(1.0));
    CHECK(o.limit_val_batches == BatchLimit::fraction(1.0));
    CHECK(o.val_check_interval == BatchLimit::fraction(1.0));
    CHECK(o.enable_checkpointing);
    CHECK(o.enable_progress_bar);
    CHECK(o.enable_model_summary);
    CHECK(o.logger);
    CHECK_FALSE(o.seed.has_value());
    CHECK(o.strategy.fsdp.sharding_strategy == "FULL_SHARD");
    CHECK(o.strategy.ddp.bucket_cap_mb == 25.0);
  }
  // Lightning: max_epochs unset with max_steps=-1 means 1000 epochs; with max_steps set, no epoch limit.
  TrainerOptions o;
  CHECK(o.effective_max_epochs() == 1000);
  o.max_steps = 10;
  CHECK(o.effective_max_epochs() > 1000000);
  o.max_epochs = 3;
  CHECK(o.effective_max_epochs() == 3);
}

TEST_CASE("TrainerOptions reads every kind of value", "[options]") {
  auto o = parse_trainer(R"(
trainer:
  max_steps: 123
  max_epochs: 7
  precision: bf16-mixed
  gradient_clip_val: 0.5
  gradient_clip_algorithm: value
  enable_checkpointing: false
  seed: 42
  default_root_dir: /tmp/somewhere
  accumulate_grad_batches: 4
)");
  CHECK(o.max_steps == 123);
  CHECK(o.max_epochs == 7);
  CHECK(o.precision == "bf16-mixed");
  REQUIRE(o.gradient_clip_val.has_value());
  CHECK(*o.gradient_clip_val == 0.5);
  CHECK(o.gradient_clip_algorithm == "value");
  CHECK_FALSE(o.enable_checkpointing);
  REQUIRE(o.seed.has_value());
  CHECK(*o.seed == 42);
  CHECK(o.default_root_dir == "/tmp/somewhere");
  CHECK(o.accumulate_grad_batches == 4);
  // Untouched keys keep their defaults.
  CHECK(o.log_every_n_steps == 50);
  // An explicit null for an optional clears it.
  auto n = parse_trainer("trainer:\n  gradient_clip_val: null\n  seed: ~\n");
  CHECK_FALSE(n.gradient_clip_val.has_value());
  CHECK_FALSE(n.seed.has_value());
}

TEST_CASE("unknown keys are ConfigErrors naming the full dotted key", "[options]") {
  CHECK_THAT(config_error([] { parse_trainer("trainer:\n  max_stepz: 10\n"); }), Contains("trainer.max_stepz"));
  // The message lists valid keys so the typo can be fixed.
  CHECK_THAT(config_error([] { parse_trainer("trainer:\n  max_stepz: 10\n"); }), Contains("max_steps"));
  CHECK_THAT(config_error([] { parse_trainer("trainer:\n  strategy:\n    name: fsdp\n    shardin_strategy: x\n"); }),
             Contains("trainer.strategy.shardin_strategy"));
  CHECK_THAT(config_error([] {
               parse_trainer("trainer:\n  strategy:\n    name: fsdp\n    auto_wrap_policy:\n      module_typez: [A]\n");
             }),
             Contains("trainer.strategy.auto_wrap_policy.module_typez"));
  // A section that is not a map.
  CHECK_THAT(config_error([] { parse_trainer("trainer: [1, 2]\n"); }), Contains("trainer"));
}

TEST_CASE("wrong value types are ConfigErrors naming the key", "[options]") {
  auto msg = config_error([] { parse_trainer("trainer:\n  max_steps: abc\n"); });
  CHECK_THAT(msg, Contains("trainer.max_steps"));
  CHECK_THAT(msg, Contains("abc"));
  CHECK_THAT(config_error([] { parse_trainer("trainer:\n  max_steps: 1.5\n"); }), Contains("trainer.max_steps"));
  CHECK_THAT(config_error([] { parse_trainer("trainer:\n  max_steps: [1, 2]\n"); }), Contains("trainer.max_steps"));
  CHECK_THAT(config_error([] { parse_trainer("trainer:\n  enable_checkpointing: maybe\n"); }),
             Contains("trainer.enable_checkpointing"));
  CHECK_THAT(config_error([] { parse_trainer("trainer:\n  gradient_clip_val: big\n"); }),
             Contains("trainer.gradient_clip_val"));
  CHECK_THAT(config_error([] { parse_trainer("trainer:\n  precision: {a: 1}\n"); }), Contains("trainer.precision"));
  CHECK_THAT(config_error([] { parse_trainer("trainer:\n  strategy:\n    name: fsdp\n    device_mesh: [1, x]\n"); }),
             Contains("trainer.strategy.device_mesh[1]"));
}

TEST_CASE("BatchLimit: an integer is a count, a float a fraction", "[options]") {
  auto count = parse_trainer("trainer:\n  limit_train_batches: 10\n");
  CHECK(count.limit_train_batches == BatchLimit::count(10));
  CHECK_FALSE(count.limit_train_batches.is_fraction);

  auto frac = parse_trainer("trainer:\n  limit_val_batches: 0.5\n  val_check_interval: 0.25\n");
  CHECK(frac.limit_val_batches == BatchLimit::fraction(0.5));
  CHECK(frac.val_check_interval == BatchLimit::fraction(0.25));

  // 1.0 is the fraction "all", 1 is one batch: they must differ.
  auto one_f = parse_trainer("trainer:\n  limit_train_batches: 1.0\n");
  auto one_i = parse_trainer("trainer:\n  limit_train_batches: 1\n");
  CHECK(one_f.limit_train_batches.is_fraction);
  CHECK_FALSE(one_i.limit_train_batches.is_fraction);
  CHECK(one_f.limit_train_batches.apply(40) == 40);
  CHECK(one_i.limit_train_batches.apply(40) == 1);

  CHECK_THAT(config_error([] { parse_trainer("trainer:\n  limit_train_batches: 1.5\n"); }),
             Contains("trainer.limit_train_batches"));
  CHECK_THAT(config_error([] { parse_trainer("trainer:\n  limit_train_batches: -2\n"); }),
             Contains("trainer.limit_train_batches"));
  CHECK_THAT(config_error([] { parse_trainer("trainer:\n  limit_test_batches: lots\n"); }),
             Contains("trainer.limit_test_batches"));

  // apply(): a count is capped by what is available; a fraction is floor(f * n), as Lightning's int().
  CHECK(BatchLimit::count(10).apply(4) == 4);
  CHECK(BatchLimit::count(3).apply(10) == 3);
  CHECK(BatchLimit::fraction(0.5).apply(7) == 3);
  CHECK(BatchLimit::fraction(0.25).apply(8) == 2);
  CHECK(BatchLimit::fraction(0.0).apply(8) == 0);
}

TEST_CASE("max_epochs: unset is 1000 epochs without max_steps, -1 is no limit, as Lightning", "[options]") {
  TrainerOptions o;
  CHECK(o.effective_max_epochs() == 1000);
  o.max_steps = 10;
  CHECK(o.effective_max_epochs() == std::numeric_limits<int64_t>::max());
  o.max_steps = -1;
  o.max_epochs = -1;  // train until max_time or a stop
  CHECK(o.effective_max_epochs() == std::numeric_limits<int64_t>::max());
  o.max_epochs = 3;
  CHECK(o.effective_max_epochs() == 3);
  const auto yaml = parse_trainer("trainer: {max_epochs: -1}");
  CHECK(yaml.max_epochs == -1);
  CHECK(yaml.effective_max_epochs() == std::numeric_limits<int64_t>::max());
  CHECK_FALSE(parse_trainer("trainer: {max_epochs: null}").max_epochs.has_value());
  auto bad = parse_trainer("trainer: {max_epochs: -2}");
  CHECK_THAT(config_error([&] { bad.validate(); }), Contains("trainer.max_epochs"));
}

TEST_CASE("strategy as a name, a map, and LightningCLI's class_path form", "[options]") {
  SECTION("a name alone") {
    auto o = parse_trainer("trainer:\n  strategy: fsdp\n");
    CHECK(o.strategy.name == "fsdp");
    CHECK(o.strategy.fsdp.sharding_strategy == "FULL_SHARD");
  }
  SECTION("a map; validate() normalizes case") {
    auto o = parse_trainer("trainer:\n  strategy: {name: fsdp, sharding_strategy: shard_grad_op, cpu_offload: true}\n");
    CHECK(o.strategy.name == "fsdp");
    CHECK(o.strategy.fsdp.cpu_offload);
    o.validate();
    CHECK(o.strategy.fsdp.sharding_strategy == "SHARD_GRAD_OP");
  }
  SECTION("fsdp_cpu_offload offloads; cpu_offload: false beside it contradicts the name") {
    auto o = parse_trainer("trainer:\n  strategy: {name: fsdp_cpu_offload, cpu_offload: true}\n");
    o.validate();
    CHECK(o.strategy.fsdp.cpu_offload);
    CHECK_THAT(
        config_error([] { parse_trainer("trainer:\n  strategy: {name: fsdp_cpu_offload, cpu_offload: false}\n"); }),
        Contains("trainer.strategy.cpu_offload") && Contains("fsdp_cpu_offload"));
  }
  SECTION("an uppercase name is normalized") {
    auto o = parse_trainer("trainer:\n  strategy: FSDP\n");
    o.validate();
    CHECK(o.strategy.name == "fsdp");
  }
  SECTION("an unknown sharding strategy names the key") {
    auto o = parse_trainer("trainer:\n  strategy: {name: fsdp, sharding_strategy: shard_everything}\n");
    auto msg = config_error([&] { o.validate(); });
    CHECK_THAT(msg, Contains("trainer.strategy.sharding_strategy"));
    CHECK_THAT(msg, Contains("SHARD_EVERYTHING"));
  }
  SECTION("an unknown strategy name") {
    auto o = parse_trainer("trainer:\n  strategy: deepspeed\n");
    auto msg = config_error([&] { o.validate(); });
    CHECK_THAT(msg, Contains("trainer.strategy"));
    CHECK_THAT(msg, Contains("deepspeed"));
  }
  SECTION("LightningCLI class_path / init_args") {
    auto o = parse_trainer(R"(
trainer:
  strategy:
    class_path: lightning.pytorch.strategies.FSDPStrategy
    init_args:
      sharding_strategy: SHARD_GRAD_OP
      cpu_offload: true
      auto_wrap_policy: {module_types: [Block]}
)");
    CHECK(o.strategy.name == "fsdp");
    CHECK(o.strategy.fsdp.sharding_strategy == "SHARD_GRAD_OP");
    CHECK(o.strategy.fsdp.cpu_offload);
    CHECK(o.strategy.fsdp.auto_wrap_policy.module_types == std::vector<std::string>{"Block"});

    auto d = parse_trainer(
        "trainer:\n  strategy:\n    class_path: lightning.pytorch.strategies.DDPStrategy\n    init_args: "
        "{bucket_cap_mb: 50}\n");
    CHECK(d.strategy.name == "ddp");
    CHECK(d.strategy.ddp.bucket_cap_mb == 50.0);

    auto bare = parse_trainer("trainer:\n  strategy:\n    class_path: SingleDeviceStrategy\n");
    CHECK(bare.strategy.name == "single_device");

    // Decoding leaves the caller's tree as it was (yaml-cpp nodes are handles: assigning one to
    // another rewrote the strategy map into its init_args).
    const YAML::Node tree =
        YAML::Load("{class_path: lightning.pytorch.strategies.DDPStrategy, init_args: {bucket_cap_mb: 50}}");
    const std::string before = YAML::Dump(tree);
    CHECK(volt::detail::YamlCodec<StrategyOptions>::decode(tree, "trainer.strategy").name == "ddp");
    CHECK(YAML::Dump(tree) == before);
    const YAML::Node named = YAML::Load("{name: fsdp_cpu_offload}");
    volt::detail::YamlCodec<StrategyOptions>::decode(named, "trainer.strategy");
    CHECK_FALSE(named["cpu_offload"]);  // no entry added by a lookup
    CHECK(named.size() == 1);

    CHECK_THAT(
        config_error([] {
          parse_trainer("trainer:\n  strategy:\n    class_path: lightning.pytorch.strategies.DeepSpeedStrategy\n");
        }),
        Contains("trainer.strategy.class_path"));
    CHECK_THAT(config_error([] {
                 parse_trainer(
                     "trainer:\n  strategy:\n    class_path: lightning.pytorch.strategies.FSDPStrategy\n"
                     "    init_args: {bucket_cap_mb: 50}\n");
               }),
               Contains("trainer.strategy.bucket_cap_mb"));
  }
  SECTION("another strategy's keys are rejected") {
    CHECK_THAT(config_error([] { parse_trainer("trainer:\n  strategy: {name: fsdp, bucket_cap_mb: 50}\n"); }),
               Contains("trainer.strategy.bucket_cap_mb"));
    CHECK_THAT(
        config_error([] { parse_trainer("trainer:\n  strategy: {name: fsdp, find_unused_parameters: true}\n"); }),
        Contains("trainer.strategy.find_unused_parameters"));
    CHECK_THAT(
        config_error([] { parse_trainer("trainer:\n  strategy: {name: ddp, sharding_strategy: FULL_SHARD}\n"); }),
        Contains("trainer.strategy.sharding_strategy"));
  }
  SECTION("a map needs a name") {
    CHECK_THAT(config_error([] { parse_trainer("trainer:\n  strategy: {sharding_strategy: FULL_SHARD}\n"); }),
               Contains("trainer.strategy"));
  }
  SECTION("assignable from a string in C++") {
    TrainerOptions o;
    o.strategy = "ddp";
    CHECK(o.strategy.name == "ddp");
  }
}

TEST_CASE("apply_override sets nested keys and promotes a strategy name to a map", "[options]") {
  YAML::Node root = YAML::Load("trainer:\n  max_epochs: 3\n  strategy: fsdp\nmodel:\n  lr: 0.1\n");
  apply_override(root, "trainer.max_epochs", "7");
  apply_override(root, "trainer.strategy.sharding_strategy", "SHARD_GRAD_OP");
  apply_override(root, "trainer.gradient_clip_val", "0.25");
  apply_override(root, "model.hidden", "64");            // a new key under an existing map
  apply_override(root, "data.loader.batch_size", "16");  // a new map chain
  apply_override(root, "trainer.limit_train_batches", "0.5");

  CHECK(root["trainer"]["max_epochs"].as<int>() == 7);
  REQUIRE(root["trainer"]["strategy"].IsMap());
  CHECK(root["trainer"]["strategy"]["name"].as<std::string>() == "fsdp");
  CHECK(root["model"]["hidden"].as<int>() == 64);
  CHECK(root["model"]["lr"].as<double>() == 0.1);  // siblings untouched
  CHECK(root["data"]["loader"]["batch_size"].as<int>() == 16);

  auto o = options_from_yaml<TrainerOptions>(root["trainer"], "trainer");
  CHECK(o.max_epochs == 7);
  CHECK(o.strategy.name == "fsdp");
  CHECK(o.strategy.fsdp.sharding_strategy == "SHARD_GRAD_OP");
  REQUIRE(o.gradient_clip_val.has_value());
  CHECK(*o.gradient_clip_val == 0.25);
  CHECK(o.limit_train_batches == BatchLimit::fraction(0.5));

  // Values are parsed as YAML: lists and maps work.
  apply_override(root, "trainer.strategy.auto_wrap_policy.module_types", "[Block, Linear]");
  o = options_from_yaml<TrainerOptions>(root["trainer"], "trainer");
  CHECK(o.strategy.fsdp.auto_wrap_policy.module_types == std::vector<std::string>{"Block", "Linear"});

  // Replacing the strategy map with a name again.
  apply_override(root, "trainer.strategy", "ddp");
  CHECK(options_from_yaml<TrainerOptions>(root["trainer"], "trainer").strategy.name == "ddp");

  // On an empty document (a map, as the CLI starts from).
  YAML::Node empty(YAML::NodeType::Map);
  apply_override(empty, "trainer.max_steps", "5");
  CHECK(options_from_yaml<TrainerOptions>(empty["trainer"], "trainer").max_steps == 5);
}

TEST_CASE("apply_override rejects malformed overrides", "[options]") {
  YAML::Node root = YAML::Load("trainer:\n  devices_list: [1, 2]\n");
  CHECK_THROWS_AS(apply_override(root, "", "1"), ConfigError);
  CHECK_THAT(config_error([&] { apply_override(root, "trainer..max_steps", "1"); }), Contains("trainer..max_steps"));
  CHECK_THROWS_AS(apply_override(root, "trainer.max_steps", "[1, 2"), ConfigError);
  // Cannot descend into a list.
  CHECK_THAT(config_error([&] { apply_override(root, "trainer.devices_list.x", "1"); }), Contains("devices_list"));
}

TEST_CASE("options_to_yaml round-trips through text", "[options]") {
  TrainerOptions o;
  o.max_steps = 123;
  o.max_epochs = 9;
  o.devices = 2;
  o.precision = "bf16-mixed";
  o.limit_train_batches = BatchLimit::count(5);
  o.limit_val_batches = BatchLimit::fraction(0.25);
  o.limit_test_batches = BatchLimit::fraction(1.0);
  o.val_check_interval = BatchLimit::count(3);
  o.gradient_clip_val = 0.5;
  o.gradient_clip_algorithm = "value";
  o.seed = 42;
  o.log_every_n_steps = 7;
  o.enable_progress_bar = false;
  o.default_root_dir = "/tmp/x y";

  SECTION("fsdp") {
    o.strategy = "fsdp";
    o.strategy.fsdp.sharding_strategy = "SHARD_GRAD_OP";
    o.strategy.fsdp.auto_wrap_policy.module_types = {"Block"};
    o.strategy.fsdp.auto_wrap_policy.min_num_params = 1000;
    o.strategy.fsdp.device_mesh = {2, 4};
    o.strategy.fsdp.param_dtype = "bfloat16";
    o.strategy.fsdp.timeout = 60;
  }
  SECTION("ddp") {
    o.strategy = "ddp";
    o.strategy.ddp.bucket_cap_mb = 12.5;
    o.strategy.ddp.static_graph = true;
    o.strategy.activation_checkpointing_policy.module_types = {"Block"};
  }
  SECTION("auto") { o.strategy.activation_checkpointing_policy.min_num_params = 10; }

  const std::string text = YAML::Dump(options_to_yaml(o));
  YAML::Node doc;
  doc["trainer"] = YAML::Load(text);
  TrainerOptions r = options_from_yaml<TrainerOptions>(doc["trainer"], "trainer");
  INFO(text);
  CHECK(r.max_steps == o.max_steps);
  CHECK(r.max_epochs == o.max_epochs);
  CHECK(r.devices == o.devices);
  CHECK(r.precision == o.precision);
  CHECK(r.limit_train_batches == o.limit_train_batches);
  CHECK(r.limit_val_batches == o.limit_val_batches);
  CHECK(r.limit_test_batches == o.limit_test_batches);
  CHECK(r.val_check_interval == o.val_check_interval);
  CHECK(r.gradient_clip_val == o.gradient_clip_val);
  CHECK(r.gradient_clip_algorithm == o.gradient_clip_algorithm);
  CHECK(r.seed == o.seed);
  CHECK(r.log_every_n_steps == o.log_every_n_steps);
  CHECK(r.enable_progress_bar == o.enable_progress_bar);
  CHECK(r.default_root_dir == o.default_root_dir);
  CHECK(r.strategy.name == o.strategy.name);
  CHECK(r.strategy.fsdp.sharding_strategy == o.strategy.fsdp.sharding_strategy);
  CHECK(r.strategy.fsdp.auto_wrap_policy.module_types == o.strategy.fsdp.auto_wrap_policy.module_types);
  CHECK(r.strategy.fsdp.auto_wrap_policy.min_num_params == o.strategy.fsdp.auto_wrap_policy.min_num_params);
  CHECK(r.strategy.fsdp.device_mesh == o.strategy.fsdp.device_mesh);
  CHECK(r.strategy.fsdp.param_dtype == o.strategy.fsdp.param_dtype);
  CHECK(r.strategy.fsdp.timeout == o.strategy.fsdp.timeout);
  CHECK(r.strategy.ddp.bucket_cap_mb == o.strategy.ddp.bucket_cap_mb);
  CHECK(r.strategy.ddp.static_graph == o.strategy.ddp.static_graph);
  CHECK(r.strategy.activation_checkpointing_policy.module_types ==
        o.strategy.activation_checkpointing_policy.module_types);
  CHECK(r.strategy.activation_checkpointing_policy.min_num_params ==
        o.strategy.activation_checkpointing_policy.min_num_params);
  // And the written form is stable: writing the re-read options gives the same text.
  CHECK(YAML::Dump(options_to_yaml(r)) == text);
}

TEST_CASE("TrainerOptions::validate range errors name the key", "[options]") {
  auto fails_with = [](auto mutate, const std::string& key) {
    TrainerOptions o;
    mutate(o);
    auto msg = config_error([&] { o.validate(); });
    CHECK_THAT(msg, Contains(key));
    // The Trainer validates at construction.
    TrainerOptions o2;
    o2.default_root_dir = "/tmp";
    mutate(o2);
    CHECK_THROWS_AS(Trainer(o2), ConfigError);
  };
  fails_with([](TrainerOptions& o) { o.devices = 0; }, "trainer.devices");
  fails_with([](TrainerOptions& o) { o.num_nodes = 0; }, "trainer.num_nodes");
  fails_with([](TrainerOptions& o) { o.accumulate_grad_batches = 0; }, "trainer.accumulate_grad_batches");
  fails_with([](TrainerOptions& o) { o.gradient_clip_algorithm = "foo"; }, "trainer.gradient_clip_algorithm");
  fails_with([](TrainerOptions& o) { o.gradient_clip_val = -1.0; }, "trainer.gradient_clip_val");
  fails_with([](TrainerOptions& o) { o.log_every_n_steps = 0; }, "trainer.log_every_n_steps");
  fails_with([](TrainerOptions& o) { o.check_val_every_n_epoch = 0; }, "trainer.check_val_every_n_epoch");
  fails_with([](TrainerOptions& o) { o.max_epochs = -2; }, "trainer.max_epochs");
  fails_with([](TrainerOptions& o) { o.max_steps = -5; }, "trainer.max_steps");
  fails_with([](TrainerOptions& o) { o.num_sanity_val_steps = -3; }, "trainer.num_sanity_val_steps");
  fails_with([](TrainerOptions& o) { o.val_check_interval = BatchLimit::count(0); }, "trainer.val_check_interval");
  fails_with([](TrainerOptions& o) { o.accelerator = "tpu"; }, "trainer.accelerator");
  fails_with([](TrainerOptions& o) { o.strategy.ddp.bucket_cap_mb = 0; }, "trainer.strategy.bucket_cap_mb");
  fails_with([](TrainerOptions& o) { o.strategy.fsdp.state_dict_type = "weird"; }, "trainer.strategy.state_dict_type");
  fails_with([](TrainerOptions& o) { o.strategy.fsdp.device_mesh = {2}; }, "trainer.strategy.device_mesh");

  // Valid edge values pass.
  TrainerOptions ok;
  ok.num_sanity_val_steps = -1;
  ok.gradient_clip_val = 0.0;
  ok.gradient_clip_algorithm = "value";
  ok.val_check_interval = BatchLimit::count(1);
  ok.accelerator = "auto";
  CHECK_NOTHROW(ok.validate());
  // This case sees no GPU (tests/gpu_visibility.h): "auto" is the CPU, with one process.
  CHECK(ok.accelerator == "cpu");
  CHECK(ok.devices == 1);
}

TEST_CASE("accelerator and devices 'auto' take every visible GPU", "[cuda][options]") {
  if (testing::no_cuda()) return;
  TrainerOptions ok;
  ok.accelerator = "auto";
  CHECK_NOTHROW(ok.validate());
  CHECK(ok.accelerator == "cuda");
  CHECK(ok.devices == static_cast<int64_t>(torch::cuda::device_count()));
}

TEST_CASE("devices, min_epochs, min_steps, reload_dataloaders_every_n_epochs and plugins in YAML", "[options]") {
  auto fails_with = [](auto mutate, const std::string& key) {
    TrainerOptions o;
    mutate(o);
    CHECK_THAT(config_error([&] { o.validate(); }), Contains(key));
  };
  CHECK(parse_trainer("trainer: {devices: auto}").devices.is_auto());
  CHECK(parse_trainer("trainer: {devices: -1}").devices.is_auto());
  CHECK(parse_trainer("trainer: {devices: 3}").devices == 3);
  CHECK(parse_trainer("trainer: {min_epochs: 2, min_steps: 5}").min_steps == 5);
  CHECK(parse_trainer("trainer: {plugins: [AsyncCheckpointIO]}").plugins ==
        std::vector<std::string>{"AsyncCheckpointIO"});
  CHECK_THROWS_WITH(parse_trainer("trainer: {devices: many}"), Catch::Contains("trainer.devices"));
  CHECK_THROWS_WITH(parse_trainer("trainer: {devices: many}"), Catch::Contains("'auto'"));
  fails_with([](TrainerOptions& o) { o.devices = 0; }, "trainer.devices");
  fails_with([](TrainerOptions& o) { o.min_epochs = -1; }, "trainer.min_epochs");
  fails_with(
      [](TrainerOptions& o) {
        o.max_epochs = 2;
        o.min_epochs = 3;
      },
      "trainer.min_epochs");
  fails_with(
      [](TrainerOptions& o) {
        o.max_steps = 2;
        o.min_steps = 3;
      },
      "trainer.min_steps");
  fails_with([](TrainerOptions& o) { o.reload_dataloaders_every_n_epochs = -1; },
             "trainer.reload_dataloaders_every_n_epochs");
  fails_with([](TrainerOptions& o) { o.plugins = {"MixedPrecision"}; }, "trainer.plugins[0]");
  // The resolved value is what a config dump shows.
  TrainerOptions o;
  o.accelerator = "cpu";
  o.validate();
  CHECK(o.devices == 1);
  CHECK_FALSE(o.devices.is_auto());
}

TEST_CASE("Precision names", "[options]") {
  SECTION("16-mixed on the CPU is a ConfigError that suggests bf16-mixed") {
    auto msg = config_error([] { Precision("16-mixed", "cpu"); });
    CHECK_THAT(msg, Contains("bf16-mixed"));
    CHECK_THAT(msg, Contains("trainer.precision"));
    CHECK_THROWS_AS(Precision("16", "cpu"), ConfigError);
    // And through the Trainer.
    TrainerOptions o;
    o.default_root_dir = "/tmp";
    o.precision = "16-mixed";
    CHECK_THROWS_AS(Trainer(o), ConfigError);
    // On CUDA it is fp16 autocast; the Strategy adds the gradient scaler.
    Precision p16("16", "cuda");
    CHECK(p16.name() == "16-mixed");
    CHECK(p16.mixed());
    CHECK(p16.compute_dtype() == at::kHalf);
    CHECK(p16.param_dtype() == at::kFloat);
  }
  SECTION("aliases and dtypes") {
    Precision p32("32", "cpu");
    CHECK(p32.name() == "32-true");
    CHECK_FALSE(p32.mixed());
    CHECK(p32.param_dtype() == at::kFloat);
    CHECK(p32.compute_dtype() == at::kFloat);

    Precision bf("bf16", "cpu");
    CHECK(bf.name() == "bf16-mixed");
    CHECK(bf.mixed());
    CHECK(bf.param_dtype() == at::kFloat);
    CHECK(bf.compute_dtype() == at::kBFloat16);

    Precision bft("bf16-true", "cpu");
    CHECK_FALSE(bft.mixed());
    CHECK(bft.param_dtype() == at::kBFloat16);
    torch::nn::Linear lin(3, 2);
    bft.convert_module(*lin);
    CHECK(lin->weight.scalar_type() == at::kBFloat16);
    torch::nn::Linear lin32(3, 2);
    p32.convert_module(*lin32);
    CHECK(lin32->weight.scalar_type() == at::kFloat);
  }
  SECTION("unknown names") {
    auto msg = config_error([] { Precision("fp8", "cpu"); });
    CHECK_THAT(msg, Contains("fp8"));
    CHECK_THAT(msg, Contains("trainer.precision"));
  }
  SECTION("bf16-mixed autocasts matmuls in the guard only") {
    Precision bf("bf16-mixed", "cpu");
    auto a = torch::randn({4, 4});
    {
      auto g = bf.forward_guard(false);
      CHECK(torch::mm(a, a).scalar_type() == at::kBFloat16);
    }
    CHECK(torch::mm(a, a).scalar_type() == at::kFloat);
  }
  SECTION("dtype names") {
    CHECK(Precision::dtype_from_name("bfloat16", "k") == at::kBFloat16);
    CHECK(Precision::dtype_from_name("float32", "k") == at::kFloat);
    CHECK_THAT(config_error([] { Precision::dtype_from_name("int3", "trainer.strategy.param_dtype"); }),
               Contains("trainer.strategy.param_dtype"));
  }
}
