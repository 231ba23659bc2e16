// Batch: the vector-like uses it keeps, named and nested fields, map/to/pin_memory, and the default
// collate over every kind of field with its errors.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "data/data_support.h"

using namespace volt;
using namespace volt::testing;
using Catch::Matchers::Contains;

TEST_CASE("Batch keeps the uses of a vector of tensors", "[data]") {
  auto x = torch::ones({2, 3}), y = torch::zeros({2});
  Batch b{x, y};
  REQUIRE(b.size() == 2);
  CHECK_FALSE(b.empty());
  CHECK(b[0].is_same(x));
  CHECK(b.at(1).is_same(y));
  CHECK_THROWS_AS(b.at(2), DataError);
  Batch c;
  CHECK(c.empty());
  c.push_back(x);
  c.emplace_back(y);
  CHECK(c.size() == 2);
  CHECK(c.back().is_same(y));
  int n = 0;
  for (const auto& t : c) n += t.defined() ? 1 : 0;
  CHECK(n == 2);
  Batch from_vector(std::vector<torch::Tensor>{x, y, x});
  CHECK(from_vector.size() == 3);
  Batch copy = b;  // copies share storage, as a vector of tensors does
  copy[0].add_(1);
  CHECK(b[0].sum().item<float>() == 12.0f);
}

TEST_CASE("Batch named and nested fields", "[data]") {
  Batch b{torch::ones({1})};
  b.set("input_ids", torch::arange(4)).set("inputs", Batch{}.set("mask", torch::ones({4}, torch::kBool)));
  CHECK(b.contains("input_ids"));
  CHECK(b.contains("inputs"));
  CHECK_FALSE(b.contains("labels"));
  CHECK(b.is_child("inputs"));
  CHECK_FALSE(b.is_child("input_ids"));
  CHECK(b.names() == std::vector<std::string>{"input_ids", "inputs"});
  CHECK(b.size() == 1);  // positional only
  CHECK(b.num_tensors() == 3);
  CHECK(torch::equal(b["input_ids"], torch::arange(4)));
  CHECK(b.child("inputs").at("mask").dtype() == torch::kBool);
  CHECK_THROWS_WITH(b.at("labels"), Contains("'labels'") && Contains("input_ids") && Contains("inputs (nested)"));
  CHECK_THROWS_WITH(b.at("inputs"), Contains("nested batch"));
  CHECK_THROWS_AS(b.child("input_ids"), DataError);
  // Replacing keeps the order; a copy owns its nested batches.
  Batch copy = b;
  copy.child("inputs").set("mask", torch::zeros({1}));
  CHECK(b.child("inputs").at("mask").numel() == 4);
  b.set("input_ids", torch::zeros({2}));
  CHECK(b.names() == std::vector<std::string>{"input_ids", "inputs"});
  CHECK(b.at("input_ids").numel() == 2);
  CHECK_THAT(b.describe(), Contains("[0] Float [1]") && Contains("inputs.mask Bool [4]"));
}

TEST_CASE("Batch map, to and pin_memory reach every tensor", "[data]") {
  Batch b{torch::ones({2}), torch::Tensor()};
  b.set("a", torch::ones({3})).set("n", Batch{torch::ones({1})}.set("deep", torch::ones({4})));
  Batch doubled = b.map([](const torch::Tensor& t) { return t * 2; });
  CHECK(doubled[0].sum().item<float>() == 4.0f);
  CHECK_FALSE(doubled[1].defined());  // undefined stays undefined
  CHECK(doubled.at("a").sum().item<float>() == 6.0f);
  CHECK(doubled.child("n")[0].item<float>() == 2.0f);
  CHECK(doubled.child("n").at("deep").sum().item<float>() == 8.0f);
  CHECK(b.at("a").sum().item<float>() == 3.0f);  // the original is untouched
  Batch d = b.to(torch::kCPU).map([](const torch::Tensor& t) { return t.to(torch::kDouble); });
  CHECK(d.child("n").at("deep").dtype() == torch::kDouble);
  Batch pinned = b.pin_memory();  // without CUDA: the batch itself
  CHECK(same_batch(pinned, b));
}

TEST_CASE("collate stacks positional, named and nested fields", "[data]") {
  IndexedDataset ds(3);
  std::vector<Batch> samples{ds.get(0), ds.get(1), ds.get(2)};
  Batch b = collate(samples);
  REQUIRE(b.size() == 2);
  CHECK(b[0].sizes() == torch::IntArrayRef({3, 4}));
  CHECK(torch::equal(b[1], torch::tensor({0, 1, 2})));
  CHECK(torch::equal(b.at("id"), torch::tensor({0, 1, 2})));
  CHECK(b.child("inputs").at("mask").sizes() == torch::IntArrayRef({3, 2}));
  CHECK(b.child("inputs").at("mask")[1][0].item<bool>());
  CHECK(b.names() == samples[0].names());
}

TEST_CASE("collate errors name the field, the sample and the shapes", "[data]") {
  auto sample = [](int64_t len) {
    return Batch{torch::ones({2})}.set("ids", torch::ones({len})).set("in", Batch{}.set("m", torch::ones({len})));
  };
  std::vector<Batch> ragged{sample(4), sample(4), sample(5)};
  CHECK_THROWS_WITH(collate(ragged), Contains("'ids'") && Contains("sample 2") && Contains("[5]") && Contains("[4]"));
  std::vector<Batch> nested{
      sample(4), Batch{torch::ones({2})}.set("ids", torch::ones({4})).set("in", Batch{}.set("m", torch::ones({3})))};
  CHECK_THROWS_WITH(collate(nested), Contains("'in.m'") && Contains("sample 1") && Contains("[3]"));
  std::vector<Batch> missing{sample(4), Batch{torch::ones({2})}.set("ids", torch::ones({4}))};
  CHECK_THROWS_WITH(collate(missing), Contains("'in'") && Contains("sample 1"));
  std::vector<Batch> positional{
      sample(4), Batch{torch::ones({3})}.set("ids", torch::ones({4})).set("in", Batch{}.set("m", torch::ones({4})))};
  CHECK_THROWS_WITH(collate(positional), Contains("'[0]'") && Contains("[3]") && Contains("[2]"));
  CHECK_THROWS_AS(collate(ragged), DataError);
  CHECK_THROWS_AS(collate({}), ConfigError);
}
