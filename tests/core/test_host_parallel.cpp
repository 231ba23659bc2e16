#include <ATen/Parallel.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "volt/core/host_parallel.h"

using namespace volt::detail;

namespace {
/// The ranges host_parallel_for hands out, in order, and the threads that ran them.
struct Calls {
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  std::set<std::thread::id> threads;

  void run(int64_t n, int64_t grain, int threads_wanted) {
    host_parallel_for(n, grain, threads_wanted, [&](int64_t b, int64_t e) {
      std::lock_guard<std::mutex> lock(mu);
      ranges.emplace_back(b, e);
      threads.insert(std::this_thread::get_id());
    });
    std::sort(ranges.begin(), ranges.end());
  }
  /// The ranges cover [0, n) without gap or overlap.
  bool cover(int64_t n) const {
    int64_t at = 0;
    for (auto [b, e] : ranges) {
      if (b != at || e <= b) return false;
      at = e;
    }
    return at == n;
  }
};
}  // namespace

TEST_CASE("host_parallel_for splits a range across threads of its own", "[host_parallel]") {
  SECTION("one range a thread, each at least the grain, all of [0, n)") {
    Calls c;
    c.run(1003, 100, 4);
    CHECK(c.ranges.size() == 4);
    CHECK(c.threads.size() == 4);  // really four threads: the caller and three started for it
    CHECK(c.threads.count(std::this_thread::get_id()) == 1);
    CHECK(c.cover(1003));
    for (auto [b, e] : c.ranges) CHECK(e - b >= 100);
  }
  SECTION("no more ranges than the grain allows") {
    Calls c;
    c.run(350, 100, 8);
    CHECK(c.ranges.size() == 3);
    CHECK(c.cover(350));
    for (auto [b, e] : c.ranges) CHECK(e - b >= 100);
  }
  SECTION("under two grains: one call on the calling thread") {
    Calls c;
    c.run(199, 100, 8);
    REQUIRE(c.ranges.size() == 1);
    CHECK(c.ranges[0] == std::make_pair<int64_t, int64_t>(0, 199));
    CHECK(*c.threads.begin() == std::this_thread::get_id());
  }
  SECTION("nothing to do, or absurd counts") {
    Calls empty;
    empty.run(0, 100, 4);
    empty.run(-5, 100, 4);
    CHECK(empty.ranges.empty());
    Calls one;
    one.run(1000, 1, 0);  // threads < 1 counts as 1
    CHECK(one.ranges.size() == 1);
    Calls tiny;
    tiny.run(10, 0, 64);  // grain < 1 counts as 1: at most one range an element
    CHECK(tiny.ranges.size() == 10);
    CHECK(tiny.cover(10));
  }
}

TEST_CASE("host_parallel_for rethrows the first error after every range has run", "[host_parallel]") {
  std::mutex mu;
  std::vector<int64_t> done;
  auto body = [&](int64_t b, int64_t) {
    {
      std::lock_guard<std::mutex> lock(mu);
      done.push_back(b);
    }
    if (b > 0) throw std::runtime_error("range failed");
  };
  CHECK_THROWS_WITH(host_parallel_for(400, 100, 4, body), "range failed");
  CHECK(done.size() == 4);  // no range was dropped or left running
}

TEST_CASE("host_threads follows LibTorch's intra-op thread count", "[host_parallel]") {
  const int before = at::get_num_threads();
  at::set_num_threads(3);
  CHECK(host_threads() == 3);
  int in_thread = 0;
  std::thread([&] { in_thread = host_threads(); }).join();  // a thread of volt's own, as FSDP's stepper
  at::set_num_threads(before);
  CHECK(in_thread == 3);
  CHECK(host_threads() == before);
}
