// volt::CLI's config for a program's own classes, in process: the class_path / init_args, name-only
// and flat forms of model, data and callbacks; several config files merged in order; overrides;
// unknown classes and keys named with the registered choices; linked arguments; --print_config
// round trips.
#include <yaml-cpp/yaml.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <string>
#include <vector>

#include "boring_model.h"
#include "cli/toy_classes.h"
#include "volt/cli/cli.h"
#include "volt/core/errors.h"

using namespace volt;
using namespace volt::testing;
using Catch::Matchers::Contains;

namespace {

YAML::Node resolve_text(const CLI& cli, const std::string& yaml) { return cli.resolve(YAML::Load(yaml)); }

/// The ConfigError message of resolving `yaml` ("" when it resolves).
std::string resolve_error(const CLI& cli, const std::string& yaml) {
  try {
    cli.resolve(YAML::Load(yaml));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

std::string write_file(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("CLI: class_path with init_args, a name alone, init_args beside class_path, the flat form", "[cli]") {
  std::vector<std::string> log;
  CLI one;  // one model class: the flat form works
  register_toys(one, &log, /*two_models=*/false);

  const YAML::Node full = resolve_text(one, "model: {class_path: ToyNet, init_args: {hidden: 16}}");
  CHECK(full["model"]["class_path"].as<std::string>() == "ToyNet");
  CHECK(full["model"]["init_args"]["hidden"].as<int64_t>() == 16);
  CHECK(full["model"]["init_args"]["lr"].as<double>() == 0.05);      // a default filled in
  CHECK(full["data"]["class_path"].as<std::string>() == "ToyData");  // the only data class, by default
  CHECK(full["data"]["init_args"]["batch_size"].as<int64_t>() == 8);

  const YAML::Node name = resolve_text(one, "model: ToyNet\ndata: ToyData");
  CHECK(name["model"]["init_args"]["hidden"].as<int64_t>() == 8);

  const YAML::Node beside = resolve_text(one, "model: {class_path: ToyNet, hidden: 3}");
  CHECK(beside["model"]["init_args"]["hidden"].as<int64_t>() == 3);

  const YAML::Node flat = resolve_text(one, "model: {hidden: 5}\ndata: {batch_size: 2}");
  CHECK(flat["model"]["class_path"].as<std::string>() == "ToyNet");
  CHECK(flat["model"]["init_args"]["hidden"].as<int64_t>() == 5);
  CHECK(flat["data"]["init_args"]["batch_size"].as<int64_t>() == 2);

  // A Lightning-style qualified class_path names the class by its last part.
  CHECK(resolve_text(one, "model: {class_path: my_project.models.ToyNet}")["model"]["class_path"].as<std::string>() ==
        "ToyNet");

  // Trainer keys beside the callbacks list; both resolved.
  const YAML::Node t = resolve_text(
      one, "trainer: {max_steps: 3, callbacks: [EarlyStopping, {class_path: Probe, init_args: {tag: a}}]}");
  CHECK(t["trainer"]["max_steps"].as<int64_t>() == 3);
  REQUIRE(t["trainer"]["callbacks"].size() == 2);
  CHECK(t["trainer"]["callbacks"][0]["class_path"].as<std::string>() == "EarlyStopping");
  CHECK(t["trainer"]["callbacks"][0]["init_args"]["patience"].as<int64_t>() == 3);
  CHECK(t["trainer"]["callbacks"][1]["init_args"]["tag"].as<std::string>() == "a");
  CHECK(t["trainer"]["callbacks"][1]["init_args"]["every"].as<int64_t>() == 1);
}

TEST_CASE("CLI: with several model classes the flat form asks for class_path, listing them", "[cli]") {
  std::vector<std::string> log;
  CLI cli;
  register_toys(cli, &log);
  const std::string msg = resolve_error(cli, "model: {hidden: 5}");
  CHECK_THAT(msg, Contains("model.class_path") && Contains("ToyNet, OtherNet"));
  CHECK(resolve_text(cli, "model: OtherNet")["model"]["init_args"]["scale"].as<double>() == 1.5);
  // No data module registered: the error says what the program must do.
  CLI no_data;
  no_data.add_model<ToyNet>("ToyNet");
  CHECK_THAT(resolve_error(no_data, "{}"),
             Contains("no data module class is registered") && Contains("add_datamodule"));
}

TEST_CASE("CLI: unknown classes and keys are ConfigErrors naming the key and the choices", "[cli]") {
  std::vector<std::string> log;
  CLI cli;
  register_toys(cli, &log);
  struct Case {
    std::string yaml;
    std::vector<std::string> says;
  };
  const std::vector<Case> cases = {
      {"model: {class_path: ToyNt}", {"model.class_path", "unknown model class 'ToyNt'", "ToyNet, OtherNet"}},
      {"model: Nope", {"model.class_path", "'Nope'", "registered: ToyNet, OtherNet"}},
      {"model: {class_path: ToyNet, init_args: {hiden: 3}}",
       {"unknown config key 'model.init_args.hiden'", "hidden", "lr", "inputs"}},
      {"model: {class_path: ToyNet, init_args: {hidden: abc}}", {"model.init_args.hidden", "an integer"}},
      {"model: {class_path: ToyNet, init_args: {hidden: 0}}", {"model.init_args.hidden", ">= 1"}},
      {"model: ToyNet\ndata: {batch_sise: 3}", {"unknown config key 'data.batch_sise'", "batch_size"}},
      {"model: ToyNet\ndata: {batch_size: 0}", {"batch_size must be >= 1"}},
      {"model: ToyNet\ndata: {class_path: Nope}", {"data.class_path", "unknown data module class", "ToyData"}},
      {"model: [1, 2]", {"config key 'model'", "a class name or a map"}},
      {"model: {class_path: ToyNet, init_args: [1]}", {"model.init_args", "a map"}},
      {"model: ToyNet\ntrainer: {callbacks: [{class_path: EarlyStoping}]}",
       {"trainer.callbacks[0].class_path", "EarlyStoping", "EarlyStopping", "ModelCheckpoint", "PredictionWriter",
        "Probe"}},
      {"model: ToyNet\ntrainer: {callbacks: [{class_path: EarlyStopping, init_args: {patiance: 3}}]}",
       {"unknown config key 'trainer.callbacks[0].init_args.patiance'", "patience"}},
      {"model: ToyNet\ntrainer: {callbacks: [Probe, {class_path: EarlyStopping, init_args: {mode: upward}}]}",
       {"trainer.callbacks[1].init_args.mode", "'min' or 'max'"}},
      {"model: ToyNet\ntrainer: {callbacks: [{monitor: val_loss}]}", {"trainer.callbacks[0]", "needs class_path"}},
      {"model: ToyNet\ntrainer: {callbacks: EarlyStopping}", {"trainer.callbacks", "a list"}},
      {"model: ToyNet\ntrainer: {max_stepz: 3}", {"unknown config key 'trainer.max_stepz'", "max_steps", "callbacks"}},
      {"model: ToyNet\nckpt: last", {"unknown config key 'ckpt'", "ckpt_path"}},
  };
  for (const auto& c : cases) {
    INFO(c.yaml);
    const std::string msg = resolve_error(cli, c.yaml);
    INFO(msg);
    REQUIRE_FALSE(msg.empty());
    for (const auto& s : c.says) CHECK_THAT(msg, Contains(s));
  }
  // The flat form names the key as it was written.
  CLI one;
  register_toys(one, &log, false);
  CHECK_THAT(resolve_error(one, "model: {hiden: 3}"), Contains("unknown config key 'model.hiden'"));
}

TEST_CASE("CLI: a class without options takes no init_args, and the factory forms register", "[cli]") {
  CLI cli;
  cli.add_model("Plain", [] { return std::make_shared<OtherNet>(OtherNetOptions{}); });
  cli.add_datamodule<ToyDataOptions>(
      "Made", [](const ToyDataOptions& o) { return std::make_shared<ToyData>(o); }, ToyDataOptions{64, 16, 4});
  const YAML::Node r = cli.resolve(YAML::Load("model: Plain"));
  CHECK(r["model"]["init_args"].size() == 0);
  CHECK(r["data"]["class_path"].as<std::string>() == "Made");
  CHECK(r["data"]["init_args"]["num_samples"].as<int64_t>() == 64);  // the registered defaults
  CHECK(r["data"]["init_args"]["batch_size"].as<int64_t>() == 16);
  CHECK_THAT(resolve_error(cli, "model: {class_path: Plain, init_args: {x: 1}}"),
             Contains("unknown config key 'model.init_args.x'") && Contains("Plain takes no init_args"));
}

TEST_CASE("CLI: several config files merge in order, and another class drops the earlier init_args", "[cli]") {
  const std::string dir = temp_dir("cli-classes-merge");
  std::vector<std::string> log;
  CLI cli;
  register_toys(cli, &log);
  const std::string a = write_file(dir, "a.yaml",
                                   "trainer: {max_steps: 5, log_every_n_steps: 2}\n"
                                   "model: {class_path: ToyNet, init_args: {hidden: 16, lr: 0.5}}\n"
                                   "data: {batch_size: 4}\n");
  const std::string b = write_file(dir, "b.yaml",
                                   "trainer: {max_steps: 7}\n"
                                   "model: {init_args: {hidden: 32}}\n"
                                   "data: {class_path: ToyData, init_args: {num_samples: 8}}\n");
  const std::string c = write_file(dir, "c.yaml", "model: OtherNet\n");

  const YAML::Node ab = cli.resolve(cli.load({a, b}, {}));
  CHECK(ab["trainer"]["max_steps"].as<int64_t>() == 7);          // b wins
  CHECK(ab["trainer"]["log_every_n_steps"].as<int64_t>() == 2);  // kept from a
  CHECK(ab["model"]["class_path"].as<std::string>() == "ToyNet");
  CHECK(ab["model"]["init_args"]["hidden"].as<int64_t>() == 32);
  CHECK(ab["model"]["init_args"]["lr"].as<double>() == 0.5);
  CHECK(ab["data"]["init_args"]["batch_size"].as<int64_t>() == 4);  // a's flat keys under b's class_path
  CHECK(ab["data"]["init_args"]["num_samples"].as<int64_t>() == 8);

  const YAML::Node ba = cli.resolve(cli.load({b, a}, {}));
  CHECK(ba["trainer"]["max_steps"].as<int64_t>() == 5);
  CHECK(ba["model"]["init_args"]["hidden"].as<int64_t>() == 16);

  // c names another class: ToyNet's init_args are not carried over to OtherNet.
  const YAML::Node abc = cli.resolve(cli.load({a, b, c}, {}));
  CHECK(abc["model"]["class_path"].as<std::string>() == "OtherNet");
  CHECK(abc["model"]["init_args"]["scale"].as<double>() == 1.5);
  CHECK_FALSE(abc["model"]["init_args"]["hidden"]);
}

TEST_CASE("CLI: overrides reach init_args in the full and the flat form, and switch classes", "[cli]") {
  const std::string dir = temp_dir("cli-classes-overrides");
  std::vector<std::string> log;
  CLI one;
  register_toys(one, &log, false);
  const std::string full = write_file(dir, "full.yaml", "model: {class_path: ToyNet, init_args: {hidden: 16}}\n");
  const std::string flat = write_file(dir, "flat.yaml", "model: {hidden: 16}\n");
  for (const auto& file : {full, flat}) {
    INFO(file);
    CHECK(one.resolve(one.load({file}, {"model.init_args.hidden=32"}))["model"]["init_args"]["hidden"].as<int64_t>() ==
          32);
    CHECK(one.resolve(one.load({file}, {"model.hidden=33"}))["model"]["init_args"]["hidden"].as<int64_t>() == 33);
    CHECK(one.resolve(one.load(
              {file}, {"model.lr=0.25", "data.batch_size=3", "trainer.max_steps=9"}))["model"]["init_args"]["lr"]
              .as<double>() == 0.25);
  }
  const YAML::Node mixed = one.resolve(one.load({full}, {"data.batch_size=3", "trainer.max_steps=9"}));
  CHECK(mixed["data"]["init_args"]["batch_size"].as<int64_t>() == 3);
  CHECK(mixed["trainer"]["max_steps"].as<int64_t>() == 9);
  CHECK_THAT(
      [&] {
        try {
          one.resolve(one.load({full}, {"model.hiden=3"}));
        } catch (const ConfigError& e) {
          return std::string(e.what());
        }
        return std::string();
      }(),
      Contains("model.init_args.hiden"));

  CLI two;
  register_toys(two, &log);
  CHECK(two.resolve(two.load({full}, {"model=OtherNet"}))["model"]["class_path"].as<std::string>() == "OtherNet");
  const YAML::Node switched = two.resolve(two.load({full}, {"model.class_path=OtherNet", "model.scale=2.5"}));
  CHECK(switched["model"]["class_path"].as<std::string>() == "OtherNet");
  CHECK(switched["model"]["init_args"]["scale"].as<double>() == 2.5);
  CHECK(two.resolve(
               two.load({full}, {"model={class_path: ToyNet, init_args: {lr: 0.125}}"}))["model"]["init_args"]["hidden"]
            .as<int64_t>() == 16);  // same class: merged
}

TEST_CASE("CLI: a flat section holds the default class's arguments: naming another class drops them", "[cli]") {
  // The form of configs/tiny.yaml: flat model keys, the class implied by set_default_model.
  const std::string dir = temp_dir("cli-classes-flat-switch");
  std::vector<std::string> log;
  CLI cli;
  register_toys(cli, &log);
  cli.set_default_model("ToyNet");
  const std::string flat = write_file(dir, "flat.yaml", "model: {hidden: 16}\n");
  const std::string other = write_file(dir, "other.yaml", "model: {class_path: OtherNet, init_args: {scale: 3.0}}\n");
  for (const auto& over : {std::string("model=OtherNet"), std::string("model.class_path=OtherNet")}) {
    INFO(over);
    const YAML::Node r = cli.resolve(cli.load({flat}, {over}));
    CHECK(r["model"]["class_path"].as<std::string>() == "OtherNet");
    CHECK_FALSE(r["model"]["init_args"]["hidden"]);
  }
  const YAML::Node files = cli.resolve(cli.load({flat, other}, {}));
  CHECK(files["model"]["class_path"].as<std::string>() == "OtherNet");
  CHECK(files["model"]["init_args"]["scale"].as<double>() == 3.0);
  CHECK_FALSE(files["model"]["init_args"]["hidden"]);
  // Naming the default class itself keeps the flat arguments.
  CHECK(cli.resolve(cli.load({flat}, {"model=ToyNet"}))["model"]["init_args"]["hidden"].as<int64_t>() == 16);
}

TEST_CASE("CLI: a trainer map override merges, an empty later section keeps keys, one document a file", "[cli]") {
  const std::string dir = temp_dir("cli-trainer-merge");
  std::vector<std::string> log;
  CLI cli;
  register_toys(cli, &log);
  const std::string a = write_file(dir, "a.yaml",
                                   "trainer: {max_steps: 5, log_every_n_steps: 2, strategy: {name: fsdp, "
                                   "sharding_strategy: SHARD_GRAD_OP}}\n"
                                   "model: ToyNet\n");
  // A map given for the whole section merges like a later file: the keys it does not name stay.
  const YAML::Node merged = cli.resolve(cli.load({a}, {"trainer={max_steps: 1}"}));
  CHECK(merged["trainer"]["max_steps"].as<int64_t>() == 1);
  CHECK(merged["trainer"]["log_every_n_steps"].as<int64_t>() == 2);
  CHECK(merged["trainer"]["strategy"]["sharding_strategy"].as<std::string>() == "SHARD_GRAD_OP");
  CHECK(cli.resolve(cli.load({a}, {"trainer={}"}))["trainer"]["max_steps"].as<int64_t>() == 5);
  // ... at any depth; another strategy name replaces the old strategy's keys instead.
  CHECK(cli.resolve(cli.load(
            {a}, {"trainer.strategy={name: fsdp, cpu_offload: true}"}))["trainer"]["strategy"]["sharding_strategy"]
            .as<std::string>() == "SHARD_GRAD_OP");
  const YAML::Node ddp = cli.resolve(cli.load({a}, {"trainer.strategy={name: ddp}"}));
  CHECK(ddp["trainer"]["strategy"]["name"].as<std::string>() == "ddp");
  CHECK_FALSE(ddp["trainer"]["strategy"]["sharding_strategy"]);
  // A later file follows the same rule.
  const std::string to_ddp = write_file(dir, "ddp.yaml", "trainer: {strategy: {name: ddp}}\n");
  CHECK_FALSE(cli.resolve(cli.load({a, to_ddp}, {}))["trainer"]["strategy"]["sharding_strategy"]);
  // A LightningCLI class_path form given over a name form is another form: it replaces too.
  const YAML::Node by_class = cli.resolve(
      cli.load({a}, {"trainer.strategy={class_path: lightning.pytorch.strategies.DDPStrategy, init_args: {}}"}));
  CHECK_FALSE(by_class["trainer"]["strategy"]["sharding_strategy"]);
  // A later file whose trainer section is empty (every key commented out) changes nothing.
  const std::string empty = write_file(dir, "empty.yaml", "trainer:\n#  max_steps: 9\nmodel:\n");
  const YAML::Node kept = cli.resolve(cli.load({a, empty}, {}));
  CHECK(kept["trainer"]["max_steps"].as<int64_t>() == 5);
  CHECK(kept["trainer"]["log_every_n_steps"].as<int64_t>() == 2);
  // Two YAML documents in one file: refused, naming the file (yaml-cpp would drop the second).
  const std::string two = write_file(dir, "two.yaml", "trainer: {max_steps: 1}\n---\ntrainer: {max_steps: 3}\n");
  CHECK_THAT(
      [&] {
        try {
          cli.load({two}, {});
        } catch (const ConfigError& e) {
          return std::string(e.what());
        }
        return std::string();
      }(),
      Contains("two.yaml") && Contains("2 YAML documents"));
  // seed_everything and trainer.seed name one seed (a saved config holds both): Lightning's name
  // wins, so that --seed_everything=N reruns a saved config with another seed.
  CHECK(resolve_text(cli, "seed_everything: 1\ntrainer: {seed: 2}\nmodel: ToyNet")["trainer"]["seed"].as<int64_t>() ==
        1);
  CHECK(resolve_text(cli, "trainer: {seed: 2}\nmodel: ToyNet")["trainer"]["seed"].as<int64_t>() == 2);
  // A trailing dot is not a key.
  CHECK_THROWS_AS(cli.load({a}, {"trainer.max_steps.=7"}), ConfigError);
}

TEST_CASE("CLI: link_arguments on parse copies a config value into the model's init_args", "[cli]") {
  std::vector<std::string> log;
  CLI cli;
  register_toys(cli, &log);
  cli.link_arguments("data.features", "model.init_args.inputs");
  const YAML::Node r = cli.resolve(YAML::Load("model: ToyNet\ndata: {features: 6}"));
  CHECK(r["model"]["init_args"]["inputs"].as<int64_t>() == 6);
  // Linked without a compute function: the config may not set the target too.
  CHECK_THAT(resolve_error(cli, "model: {class_path: ToyNet, init_args: {inputs: 3}}"),
             Contains("model.init_args.inputs") && Contains("data.features") && Contains("linked"));

  CLI computed;
  register_toys(computed, &log);
  computed.link_arguments("trainer.max_steps", "model.hidden", Link::OnParse, [](const LinkValues& v) {
    return YAML::Node(v.source.as<int64_t>() + v.target.as<int64_t>());
  });
  CHECK(computed.resolve(YAML::Load("model: ToyNet\ntrainer: {max_steps: 10}"))["model"]["init_args"]["hidden"]
            .as<int64_t>() == 18);  // 10 + the default 8

  CLI bad;
  bad.link_arguments("model.x", "data.y");
  bad.add_model<ToyNet>("ToyNet");
  bad.add_datamodule<ToyData>("ToyData");
  CHECK_THAT(resolve_error(bad, "{}"), Contains("link_arguments") && Contains("model init arg"));
}

TEST_CASE("CLI: a class registered twice is reported, with exit code 2", "[cli]") {
  std::vector<std::string> log;
  CLI cli;
  register_toys(cli, &log);
  cli.add_model<ToyNet>("ToyNet");
  const MainRun r = run_main(cli, {"fit", "--print_config", "--config", "/dev/null"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Contains("model 'ToyNet' is registered twice"));
}

TEST_CASE("CLI: --print_config prints every key with class_path and init_args, and parses back to itself", "[cli]") {
  const std::string dir = temp_dir("cli-classes-print");
  std::vector<std::string> log;
  CLI cli;
  register_toys(cli, &log);
  const std::string cfg =
      write_file(dir, "cfg.yaml",
                 "seed_everything: 3\n"
                 "trainer: {max_steps: 4, default_root_dir: " +
                     dir +
                     ", callbacks: [{class_path: EarlyStopping, init_args: {patience: 5}}, Probe]}\n"
                     "model: {class_path: ToyNet, init_args: {hidden: 12}}\n");
  const MainRun r = run_main(cli, {"fit", "--config", cfg, "--data.batch_size=2", "--print_config"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  const YAML::Node printed = YAML::Load(r.out);
  CHECK(printed["model"]["class_path"].as<std::string>() == "ToyNet");
  CHECK(printed["model"]["init_args"]["hidden"].as<int64_t>() == 12);
  CHECK(printed["model"]["init_args"]["lr"].as<double>() == 0.05);
  CHECK(printed["data"]["class_path"].as<std::string>() == "ToyData");
  CHECK(printed["data"]["init_args"]["batch_size"].as<int64_t>() == 2);
  CHECK(printed["data"]["init_args"]["num_samples"].as<int64_t>() == 32);
  CHECK(printed["trainer"]["max_steps"].as<int64_t>() == 4);
  CHECK(printed["trainer"]["gradient_clip_algorithm"].as<std::string>() == "norm");
  CHECK(printed["trainer"]["callbacks"][0]["init_args"]["patience"].as<int64_t>() == 5);
  CHECK(printed["trainer"]["callbacks"][0]["init_args"]["monitor"].as<std::string>() == "val_loss");
  CHECK(printed["trainer"]["callbacks"][1]["init_args"]["tag"].as<std::string>() == "none");
  CHECK(printed["seed_everything"].as<int64_t>() == 3);
  CHECK(printed["ckpt_path"].as<std::string>().empty());
  CHECK(log == std::vector<std::string>{"built none"});  // callbacks are built (checked), nothing runs
  CHECK_FALSE(std::ifstream(dir + "/lightning_logs/version_0/config.yaml").good());

  const std::string again_file = write_file(dir, "printed.yaml", r.out);
  const MainRun again = run_main(cli, {"fit", "--config", again_file, "--print_config"});
  REQUIRE(again.code == 0);
  CHECK(YAML::Dump(YAML::Load(again.out)) == YAML::Dump(printed));
}
