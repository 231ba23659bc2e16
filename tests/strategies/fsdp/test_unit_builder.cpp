// Unit tests of volt::detail::build_units, in this process at shard size 1: which unit flattens each
// parameter, and the common-ancestor rule for a weight held by several modules (tied weights).
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "volt/core/hooked_module.h"
#include "volt/strategies/fsdp/deferred_wrap.h"
#include "volt/strategies/fsdp/unit_builder.h"

using namespace volt;

namespace {

/// A unit candidate holding one weight, its own or one it shares.
class Proj : public HookedModule {
 public:
  explicit Proj(torch::Tensor w) : HookedModule("Proj") { weight = register_parameter("weight", std::move(w)); }
  torch::Tensor weight;
};

class Block : public HookedModule {
 public:
  Block() : HookedModule("Block") {}
};

/// "unit: entry entry; unit: ..." for every unit, the root first (named "<root>").
std::string layout_of(const std::vector<volt::detail::FSDPUnit>& units) {
  std::string out;
  for (const auto& u : units) {
    out += (out.empty() ? "" : "; ") + (u.name.empty() ? std::string("<root>") : u.name) + ":";
    for (const auto& e : u.flat->entries()) out += " " + e.name;
  }
  return out;
}

std::vector<volt::detail::FSDPUnit> build(torch::nn::Module& model, std::vector<std::string> types) {
  ModulePolicy policy;
  policy.module_types = {types.begin(), types.end()};
  volt::detail::DeferredUnits none;
  return volt::detail::build_units(model, policy, none, volt::detail::FlatParamSpec{});
}

}  // namespace

TEST_CASE("build_units: a weight tied across sibling units goes to their common ancestor's unit (the root)",
          "[fsdp][tied][unit_builder]") {
  torch::nn::Module model("Model");
  torch::Tensor tied = torch::randn({4, 4}, torch::requires_grad());
  model.register_module("a", std::make_shared<Proj>(tied));
  model.register_module("b", std::make_shared<Proj>(tied));
  model.register_module("c", std::make_shared<Proj>(torch::randn({4, 4}, torch::requires_grad())));
  model.register_parameter("bias", torch::zeros({4}, torch::requires_grad()));
  auto units = build(model, {"Proj"});
  // a and b each hold the weight the other reads: neither may free it, so the root holds it, once.
  CHECK(layout_of(units) == "<root>: bias a.weight; a:; b:; c: c.weight");
}

TEST_CASE("build_units: a weight tied inside a unit stays in that unit, inner units claim their own first",
          "[fsdp][tied][unit_builder]") {
  torch::nn::Module model("Model");
  auto block = std::make_shared<Block>();
  torch::Tensor tied = torch::randn({4, 4}, torch::requires_grad());
  block->register_module("a", std::make_shared<Proj>(tied));
  block->register_module("b", std::make_shared<Proj>(tied));
  block->register_module("own", std::make_shared<Proj>(torch::randn({2, 2}, torch::requires_grad())));
  model.register_module("blk", block);
  model.register_module("c", std::make_shared<Proj>(torch::randn({4, 4}, torch::requires_grad())));
  auto units = build(model, {"Block", "Proj"});
  CHECK(layout_of(units) == "<root>:; blk: blk.a.weight; blk.a:; blk.b:; blk.own: blk.own.weight; c: c.weight");
  // Every parameter is in exactly one unit: the tied tensor once.
  int64_t entries = 0;
  for (const auto& u : units) entries += static_cast<int64_t>(u.flat->entries().size());
  CHECK(entries == 3);
}

TEST_CASE("ParamOwners names a module outside a unit that holds the same parameter", "[fsdp][tied][unit_builder]") {
  torch::nn::Module model("Model");
  auto block = std::make_shared<Block>();
  torch::Tensor tied = torch::randn({3}, torch::requires_grad());
  block->register_module("a", std::make_shared<Proj>(tied));
  model.register_module("blk", block);
  model.register_module("head", std::make_shared<Proj>(tied));
  const volt::detail::ParamOwners owners(model);
  CHECK(owners.outside(tied, "blk.a") == "head");
  CHECK(owners.outside(tied, "blk") == "head");
  CHECK(owners.outside(tied, "head") == "blk.a");
  CHECK(owners.outside(tied, "").empty());  // the root unit contains every module
  torch::Tensor other = torch::randn({3});
  CHECK(owners.outside(other, "blk").empty());
}
