// Hostile YAML (cycles, billion laughs, deep nesting) is refused before any walk of the tree, and
// merge keys (`<<`) are resolved as YAML 1.1 defines them.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>

#include "boring_model.h"
#include "error_capture.h"
#include "volt/cli/cli.h"
#include "volt/core/errors.h"
#include "volt/core/options.h"
#include "volt/core/yaml_load.h"

using namespace volt;
using namespace volt::testing;
using Catch::Matchers::Contains;

namespace {
std::string write_config(const std::string& text) {
  const std::string path = temp_dir("yaml-load") + "/c.yaml";
  std::ofstream(path) << text;
  return path;
}

/// A 10-level "billion laughs": 10^10 values once expanded, in about 400 bytes.
std::string billion_laughs() {
  std::string text = "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (int i = 1; i <= 9; ++i) {
    const std::string p = "*a" + std::to_string(i - 1);
    text += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [" + p;
    for (int k = 1; k < 10; ++k) text += "," + p;
    text += "]\n";
  }
  return text + "model: {x: *a9}\n";
}
}  // namespace

TEST_CASE("a YAML alias that refers to its own node is refused, naming the line", "[core][yaml]") {
  for (const std::string text : {"a: &a [*a]\n", "model:\n  x: &x {y: [1, *x]}\n"}) {
    INFO(text);
    CHECK_THAT(config_error([&] { volt::detail::load_yaml(text, "config file 'c.yaml'"); }),
               Contains("config file 'c.yaml'") && Contains("refers to a node it is part of") && Contains("line"));
    const std::string path = write_config(text);
    CHECK_THAT(config_error([&] { cli::load_configs({path}, {}); }), Contains(path) && Contains("cycle"));
  }
  CHECK_THAT(config_error([] {
               YAML::Node root(YAML::NodeType::Map);
               apply_override(root, "model.x", "&a [*a]");
             }),
             Contains("override --model.x") && Contains("cycle"));
}

TEST_CASE("a billion laughs is refused at once, and deep nesting too", "[core][yaml]") {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string path = write_config(billion_laughs());
  CHECK_THAT(config_error([&] { cli::load_configs({path}, {}); }),
             Contains(path) && Contains("aliases are expanded") && Contains("1000000"));
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 5.0);
  // A few levels of it (1000 values) are an ordinary document.
  CHECK(volt::detail::load_yaml("a: &a [1, 2, 3]\nb: &b [*a, *a, *a]\nc: [*b, *b]\n", "x")["c"][1][2][0].as<int>() ==
        1);

  const std::string deep = std::string(300, '[') + std::string(300, ']');
  CHECK_THAT(config_error([&] { volt::detail::load_yaml("a: " + deep, "config file 'd.yaml'"); }),
             Contains("config file 'd.yaml'") && Contains("nested deeper than 200"));
  CHECK(volt::detail::load_yaml("a: " + std::string(150, '[') + std::string(150, ']'), "x")["a"].IsSequence());
}

TEST_CASE("nesting is bounded once aliases are expanded: a chain of deep anchors is refused", "[core][yaml]") {
  // Each anchor nests 150 deep (fine on its own) and holds an alias of the previous one: expanded,
  // a0..a99 would nest 15,000 deep, which a later walk of the tree (recursive) does not survive.
  auto chain = [](int links, int deep) {
    std::string text = "a0: &a0 " + std::string(deep, '[') + "1" + std::string(deep, ']') + "\n";
    for (int i = 1; i < links; ++i)
      text += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " " + std::string(deep, '[') + "*a" +
              std::to_string(i - 1) + std::string(deep, ']') + "\n";
    return text;
  };
  CHECK_THAT(config_error([&] { volt::detail::load_yaml(chain(100, 150), "config file 'chain.yaml'"); }),
             Contains("config file 'chain.yaml'") && Contains("nested deeper than 200") && Contains("line 2") &&
                 Contains("aliases are expanded"));
  // Two links of 90 nest 181 deep (one map level too): allowed, and walkable.
  const YAML::Node ok = volt::detail::load_yaml(chain(2, 90), "x");
  YAML::Node n = ok["a1"];
  int depth = 0;
  while (n.IsSequence()) {
    n = n[0];
    ++depth;
  }
  CHECK(depth == 180);
  CHECK(n.as<int>() == 1);
  // The alias's own depth counts too: an anchor 150 deep, aliased 60 levels down.
  CHECK_THAT(config_error([] {
               volt::detail::load_yaml("a: &a " + std::string(150, '[') + std::string(150, ']') +
                                           "\nb: " + std::string(60, '[') + "*a" + std::string(60, ']') + "\n",
                                       "x");
             }),
             Contains("nested deeper than 200"));
}

TEST_CASE("YAML merge keys: the map's own keys win, then the merged maps in order", "[core][yaml]") {
  const YAML::Node n = volt::detail::load_yaml(
      "base: &base {lr: 0.1, weight_decay: 0.01, nested: {a: 1}}\n"
      "other: &other {lr: 0.5, warmup: 3}\n"
      "one: {<<: *base, lr: 0.2}\n"
      "two: {<<: [*other, *base]}\n"
      "quoted: {'<<': 1}\n",
      "x");
  CHECK_FALSE(n["one"]["<<"]);
  CHECK(n["one"]["lr"].as<double>() == 0.2);
  CHECK(n["one"]["weight_decay"].as<double>() == 0.01);
  CHECK(n["one"]["nested"]["a"].as<int>() == 1);
  CHECK(n["two"]["lr"].as<double>() == 0.5);
  CHECK(n["two"]["warmup"].as<int>() == 3);
  CHECK(n["two"]["weight_decay"].as<double>() == 0.01);
  CHECK(n["quoted"]["<<"].as<int>() == 1);  // a quoted '<<' is an ordinary key
  CHECK_THAT(config_error([] { volt::detail::load_yaml("a: {<<: 3}", "x"); }), Contains("merge key"));

  // Through the config files: a merged section is read like a written-out one, and an override of
  // a merged key leaves its source alone.
  const std::string path = write_config(
      "model: &m {lr: 0.1}\n"
      "data: {<<: *m, batch_size: 4}\n");
  const YAML::Node root = cli::load_configs({path}, {"data.lr=0.7"});
  CHECK(root["data"]["lr"].as<double>() == 0.7);
  CHECK(root["data"]["batch_size"].as<int>() == 4);
  CHECK(root["model"]["lr"].as<double>() == 0.1);
  CHECK_FALSE(root["data"]["<<"]);
}
