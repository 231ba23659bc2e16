// Unit tests of detail::FlatParam: the layout of one FSDP unit's flat buffer (padding, shard size,
// each rank's slices of the parameters) for any shard rank and size, built in this process; and
// the gather / reshard / gradient cycle at shard size 1.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "volt/strategies/fsdp/flat_param.h"

using namespace volt;
using volt::detail::FlatParam;
using volt::detail::FlatParamEntry;

namespace {

/// Parameters of the given shapes holding 1, 2, 3, ... in flat order (so every value is unique).
std::vector<FlatParamEntry> entries_of(const std::vector<std::vector<int64_t>>& shapes) {
  std::vector<FlatParamEntry> out;
  double next = 1;
  for (size_t i = 0; i < shapes.size(); ++i) {
    int64_t n = 1;
    for (int64_t d : shapes[i]) n *= d;
    FlatParamEntry e;
    e.name = "p" + std::to_string(i);
    e.param = (torch::arange(n, torch::kFloat) + next).view(shapes[i]).requires_grad_(true);
    next += static_cast<double>(n);
    out.push_back(std::move(e));
  }
  return out;
}

FlatParam make(const std::vector<std::vector<int64_t>>& shapes, int64_t rank, int64_t size,
               at::ScalarType dtype = torch::kFloat) {
  return FlatParam("unit", entries_of(shapes), rank, size, dtype, torch::kCPU);
}

/// Each slice as "entry/param_offset/shard_offset/length", space-separated.
std::string slices_of(FlatParam& f) {
  std::string out;
  for (const auto& s : f.slices())
    out += (out.empty() ? "" : " ") + std::to_string(s.entry) + "/" + std::to_string(s.param_offset) + "/" +
           std::to_string(s.shard_offset) + "/" + std::to_string(s.length);
  return out;
}

}  // namespace

TEST_CASE("FlatParam pads the flat buffer to a multiple of the shard count", "[unit][flat_param]") {
  // 3 + 5 + 2 = 10 elements.
  const std::vector<std::vector<int64_t>> shapes = {{3}, {5}, {2, 1}};
  struct Case {
    int64_t size, padded, shard;
  };
  for (auto c : {Case{1, 10, 10}, Case{2, 10, 5}, Case{3, 12, 4}, Case{4, 12, 3}, Case{5, 10, 2}, Case{7, 14, 2},
                 Case{16, 16, 1}}) {
    INFO("shard size " << c.size);
    for (int64_t rank : {int64_t{0}, c.size - 1}) {
      auto f = make(shapes, rank, c.size);
      CHECK(f.numel() == 10);
      CHECK(f.padded_numel() == c.padded);
      CHECK(f.shard_numel() == c.shard);
      CHECK(f.shard().numel() == c.shard);
      CHECK(f.shard().scalar_type() == torch::kFloat);
    }
  }
  // A unit without parameters still has one (padding) element per rank.
  FlatParam empty("empty", {}, 1, 4, torch::kFloat, torch::kCPU);
  CHECK(empty.numel() == 0);
  CHECK(empty.padded_numel() == 4);
  CHECK(empty.shard_numel() == 1);
  CHECK(empty.slices().empty());
}

TEST_CASE("FlatParam entries: offsets in declaration order, shapes and names kept", "[unit][flat_param]") {
  auto f = make({{3}, {5}, {2, 1}}, 0, 3);
  auto& e = f.entries();
  REQUIRE(e.size() == 3);
  CHECK(e[0].name == "p0");
  CHECK(e[2].name == "p2");
  CHECK(std::vector<int64_t>{e[0].offset, e[1].offset, e[2].offset} == std::vector<int64_t>{0, 3, 8});
  CHECK(std::vector<int64_t>{e[0].numel, e[1].numel, e[2].numel} == std::vector<int64_t>{3, 5, 2});
  CHECK(e[2].shape == std::vector<int64_t>{2, 1});
  CHECK(e[2].param.sizes() == torch::IntArrayRef({2, 1}));  // the module's tensor keeps its shape
  CHECK(f.unit_name() == "unit");
}

TEST_CASE("FlatParam slices: this rank's piece of every parameter it overlaps", "[unit][flat_param]") {
  // Flat layout of {3}, {5}, {2}: p0 = [0, 3), p1 = [3, 8), p2 = [8, 10), padding after.
  const std::vector<std::vector<int64_t>> shapes = {{3}, {5}, {2}};
  SECTION("3 ranks, shard 4: p1 straddles ranks 0 and 1, rank 2 ends in padding") {
    auto r0 = make(shapes, 0, 3);
    CHECK(slices_of(r0) == "0/0/0/3 1/0/3/1");
    auto r1 = make(shapes, 1, 3);
    CHECK(slices_of(r1) == "1/1/0/4");
    auto r2 = make(shapes, 2, 3);
    CHECK(slices_of(r2) == "2/0/0/2");
  }
  SECTION("4 ranks, shard 3: p1 over ranks 1 and 2, p2 over ranks 2 and 3") {
    auto r0 = make(shapes, 0, 4);
    CHECK(slices_of(r0) == "0/0/0/3");
    auto r1 = make(shapes, 1, 4);
    CHECK(slices_of(r1) == "1/0/0/3");
    auto r2 = make(shapes, 2, 4);
    CHECK(slices_of(r2) == "1/3/0/2 2/0/2/1");
    auto r3 = make(shapes, 3, 4);
    CHECK(slices_of(r3) == "2/1/0/1");
  }
  SECTION("a parameter over three ranks") {
    // {1}, {10}, {1}: 12 elements, shard 3; p1 = [1, 11).
    const std::vector<std::vector<int64_t>> s = {{1}, {10}, {1}};
    auto r0 = make(s, 0, 4);
    CHECK(slices_of(r0) == "0/0/0/1 1/0/1/2");
    auto r1 = make(s, 1, 4);
    CHECK(slices_of(r1) == "1/2/0/3");
    auto r2 = make(s, 2, 4);
    CHECK(slices_of(r2) == "1/5/0/3");
    auto r3 = make(s, 3, 4);
    CHECK(slices_of(r3) == "1/8/0/2 2/0/2/1");
  }
  SECTION("ranks holding only padding have no slice") {
    for (int64_t rank : {10, 13, 15}) {
      auto f = make(shapes, rank, 16);
      CHECK(f.slices().empty());
      CHECK(torch::equal(f.shard(), torch::zeros({1})));
    }
    auto last = make(shapes, 9, 16);
    CHECK(slices_of(last) == "2/1/0/1");
  }
  SECTION("one rank holds everything") {
    auto f = make(shapes, 0, 1);
    CHECK(slices_of(f) == "0/0/0/3 1/0/3/5 2/0/8/2");
  }
}

TEST_CASE("FlatParam shards and slice views hold the parameters' values, every element on exactly one rank",
          "[unit][flat_param]") {
  const std::vector<std::vector<int64_t>> shapes = {{2, 3}, {7}, {1}, {4, 2}};  // 22 elements
  const auto originals = entries_of(shapes);
  for (int64_t size : {1, 2, 3, 5, 8, 22, 30}) {
    INFO("shard size " << size);
    std::vector<int64_t> covered(22, 0);
    for (int64_t rank = 0; rank < size; ++rank) {
      INFO("rank " << rank);
      auto f = make(shapes, rank, size);
      const int64_t sn = f.shard_numel();
      // The shard is this rank's range of the flat values, zeros in the padding.
      auto flat = torch::zeros({f.padded_numel()});
      flat.narrow(0, 0, 22).copy_(torch::arange(22, torch::kFloat) + 1);
      CHECK(torch::equal(f.shard(), flat.narrow(0, rank * sn, sn)));
      for (const auto& s : f.slices()) {
        const auto want = originals[s.entry].param.detach().reshape(-1).narrow(0, s.param_offset, s.length);
        CHECK(torch::equal(f.shard().narrow(0, s.shard_offset, s.length), want));
        // The optimizer's view: a leaf into the shard's own memory.
        CHECK(torch::equal(s.view, want));
        CHECK(s.view.requires_grad());
        CHECK(s.view.is_leaf());
        CHECK(s.view.data_ptr<float>() == f.shard().data_ptr<float>() + s.shard_offset);
        const int64_t start = f.entries()[s.entry].offset + s.param_offset;
        for (int64_t i = start; i < start + s.length; ++i) ++covered[i];
      }
    }
    CHECK(covered == std::vector<int64_t>(22, 1));
  }
}

TEST_CASE("FlatParam at shard size 1: unshard, reshard and the parameters as views", "[unit][flat_param]") {
  auto originals = entries_of({{3}, {2, 2}});
  auto f = make({{3}, {2, 2}}, 0, 1);
  auto p0 = f.entries()[0].param, p1 = f.entries()[1].param;
  CHECK(f.state() == volt::detail::UnitState::Sharded);
  CHECK(f.unsharded_bytes() == 0);  // the parameters' storage is released until needed

  f.unshard(nullptr);
  CHECK(f.state() == volt::detail::UnitState::Unsharded);
  CHECK(f.unsharded_bytes() == 7 * sizeof(float));
  CHECK(torch::equal(p0, originals[0].param.detach()));
  CHECK(torch::equal(p1, originals[1].param.detach()));
  CHECK(p1.data_ptr<float>() == p0.data_ptr<float>() + 3);  // views of one buffer

  // A step on the shard (through a slice view) shows in the parameters at the next unshard.
  f.reshard();
  CHECK(f.state() == volt::detail::UnitState::Sharded);
  CHECK(f.unsharded_bytes() == 0);
  {
    torch::NoGradGuard ng;
    f.slices()[1].view.add_(10.0);
  }
  f.unshard_async(nullptr);  // shard size 1: done at once
  CHECK(f.state() == volt::detail::UnitState::Unsharded);
  CHECK(torch::equal(p1, originals[1].param.detach() + 10.0));
  CHECK(torch::equal(p0, originals[0].param.detach()));
  f.unshard(nullptr);  // already unsharded: no-op
  CHECK(torch::equal(f.gather_full(nullptr),
                     torch::cat({originals[0].param.detach().view(-1), originals[1].param.detach().view(-1) + 10.0})));
}

TEST_CASE("FlatParam gathers in the parameter dtype and keeps fp32 master values", "[unit][flat_param]") {
  auto f = make({{3}}, 0, 1, torch::kBFloat16);
  {
    torch::NoGradGuard ng;
    f.slices()[0].view.copy_(torch::tensor({0.1f, 1.0f / 3.0f, 1000.5f}));
  }
  f.unshard(nullptr);
  const auto& p = f.entries()[0].param;
  CHECK(p.scalar_type() == torch::kBFloat16);
  CHECK(f.unsharded_bytes() == 3 * 2);
  CHECK(f.send_bytes() == 0);  // no bf16 copy of the shard kept beside the gathered unit
  CHECK(torch::equal(p, torch::tensor({0.1f, 1.0f / 3.0f, 1000.5f}).to(torch::kBFloat16)));
  CHECK(f.shard().scalar_type() == torch::kFloat);
  CHECK(f.shard()[2].item<float>() == 1000.5f);  // not rounded to bf16 (1000 or 1004)
  f.reshard();
}

TEST_CASE("FlatParam at shard size 1: gradients flattened into the shard gradient, averaged over the world",
          "[unit][flat_param]") {
  auto f = make({{2}, {3}}, 0, 1);
  auto& e = f.entries();
  auto backward = [&](double w0, double w1) {
    f.unshard(nullptr);
    auto loss = (e[0].param * w0).sum() + (e[1].param * torch::tensor({1.0f, 2.0f, 3.0f}) * w1).sum();
    loss.backward();
    f.reshard();
  };
  CHECK_FALSE(f.shard_grad().defined());
  backward(1.0, 1.0);
  f.reduce_gradients(nullptr, nullptr, torch::kFloat, /*world_size=*/4);
  // d(loss)/d(p) = [1, 1 | 1, 2, 3], divided by the world size (a mean over data-parallel ranks).
  CHECK(torch::allclose(f.shard_grad(), torch::tensor({1.0f, 1.0f, 1.0f, 2.0f, 3.0f}) / 4.0));
  CHECK_FALSE(e[0].param.grad().defined());  // the full gradients are freed

  // Accumulation: a second backward before the step adds to the shard gradient.
  backward(2.0, 0.0);
  f.reduce_gradients(nullptr, nullptr, torch::kFloat, 4);
  CHECK(torch::allclose(f.shard_grad(), torch::tensor({3.0f, 3.0f, 1.0f, 2.0f, 3.0f}) / 4.0));

  // The optimizer sees them through the slices.
  f.expose_slice_grads();
  REQUIRE(f.slices().size() == 2);
  CHECK(torch::allclose(f.slices()[0].view.grad(), torch::tensor({0.75f, 0.75f})));
  CHECK(torch::allclose(f.slices()[1].view.grad(), torch::tensor({0.25f, 0.5f, 0.75f})));
  CHECK(f.slices()[1].view.grad().data_ptr<float>() == f.shard_grad().data_ptr<float>() + 2);

  // No gradient anywhere: the shard gradient stays undefined (the optimizer skips the unit).
  auto g = make({{2}}, 0, 1);
  g.reduce_gradients(nullptr, nullptr, torch::kFloat, 1);
  CHECK_FALSE(g.shard_grad().defined());
  g.expose_slice_grads();
  CHECK_FALSE(g.slices()[0].view.grad().defined());
}

TEST_CASE("FlatParam: a frozen parameter's slice gets no gradient", "[unit][flat_param]") {
  auto f = make({{2}, {2}}, 0, 1);
  auto& e = f.entries();
  e[1].param.requires_grad_(false);
  f.unshard(nullptr);
  (e[0].param * 3.0).sum().backward();
  f.reshard();
  f.reduce_gradients(nullptr, nullptr, torch::kFloat, 1);
  CHECK(torch::allclose(f.shard_grad(), torch::tensor({3.0f, 3.0f, 0.0f, 0.0f})));
  f.expose_slice_grads();
  CHECK(torch::allclose(f.slices()[0].view.grad(), torch::tensor({3.0f, 3.0f})));
  CHECK_FALSE(f.slices()[1].view.grad().defined());
}

TEST_CASE("FlatParam at shard size 1: the shard gradient rounds as a buffer in the reduce dtype would",
          "[unit][flat_param]") {
  // Gradients that bf16 and fp16 cannot hold exactly, and their expected fp32 shard gradients.
  const auto g32 = torch::tensor({1.0f / 3.0f, -1000.7f, 3e-8f, 70000.5f});
  auto reduced = [&](at::ScalarType param_dtype, at::ScalarType reduce_dtype, int64_t world) {
    auto f = make({{4}}, 0, 1, param_dtype);
    f.unshard(nullptr);
    auto& p = f.entries()[0].param;
    (p * g32.to(param_dtype)).sum().backward();  // d/dp = g32 in the parameter dtype
    f.reshard();
    f.reduce_gradients(nullptr, nullptr, reduce_dtype, world);
    REQUIRE(f.shard_grad().scalar_type() == torch::kFloat);
    return f.shard_grad().clone();
  };
  // fp32 gradients reduced in fp32: exact.
  CHECK(torch::equal(reduced(torch::kFloat, torch::kFloat, 1), g32));
  // fp32 gradients with reduce_dtype bf16: rounded to bf16 once, as the collective's input is.
  const auto bf = reduced(torch::kFloat, torch::kBFloat16, 1);
  CHECK(torch::equal(bf, g32.to(torch::kBFloat16).to(torch::kFloat)));
  CHECK_FALSE(torch::equal(bf, g32));
  // bf16 gradients (bf16 parameters) reduced in bf16 or fp32: their values, exactly.
  CHECK(torch::equal(reduced(torch::kBFloat16, torch::kBFloat16, 1), g32.to(torch::kBFloat16).to(torch::kFloat)));
  CHECK(torch::equal(reduced(torch::kBFloat16, torch::kFloat, 1), g32.to(torch::kBFloat16).to(torch::kFloat)));
  // fp16 reduce dtype: 70000.5 overflows fp16, as it would in the collective.
  const auto h = reduced(torch::kFloat, torch::kHalf, 1);
  CHECK(std::isinf(h[3].item<float>()));
  CHECK(torch::equal(h, g32.to(torch::kHalf).to(torch::kFloat)));
  // A world of 4 at shard size 1 (replicas): fp16 divides by 2 before the sum and by 2 after it.
  const auto h4 = reduced(torch::kFloat, torch::kHalf, 4);
  CHECK(torch::equal(h4, (g32.to(torch::kHalf) / 2).to(torch::kFloat) / 2));
  // bf16 with a world of 4: rounded once, then the mean in fp32.
  CHECK(torch::equal(reduced(torch::kFloat, torch::kBFloat16, 4), g32.to(torch::kBFloat16).to(torch::kFloat) / 4));
}
