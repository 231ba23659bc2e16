// Unit tests of volt's ProcessGroup: a world of 1 in this process, and worlds of 2 and 3 separate
// processes (the test worker's --pg_scenario, see process_group_scenario.h) over Gloo, whose gaps
// volt fills: no AVG, no flat all-gather, no reduce-scatter, no bf16.
#include <torch/torch.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "boring_model.h"
#include "distributed/multi_rank.h"
#include "distributed/process_group_scenario.h"
#include "volt/core/errors.h"
#include "volt/distributed/cluster_env.h"
#include "volt/distributed/process_group.h"

using namespace volt;
using namespace volt::testing;

namespace {

using Results = std::map<std::string, torch::Tensor>;

/// Runs the scenario in `world` worker processes (once per world size and test process) and
/// returns each rank's results.
const std::vector<Results>& scenario(int64_t world) {
  static std::map<int64_t, std::vector<Results>> cache;
  if (cache.count(world)) return cache[world];
  const std::string dir = temp_dir("pg-scenario");
  const int port = volt::detail::find_free_port();
  std::vector<std::vector<std::string>> argvs;
  std::vector<std::map<std::string, std::string>> envs;
  for (int64_t r = 0; r < world; ++r) {
    argvs.push_back({VOLT_TEST_WORKER, "--pg_scenario=" + dir + "/out"});
    envs.push_back(torchrun_env(static_cast<int>(r), static_cast<int>(world), port));
  }
  const auto codes = run_processes(argvs, envs, 180, dir + "/rank");
  std::string logs;
  for (int64_t r = 0; r < world; ++r) logs += read_text(dir + "/rank." + std::to_string(r) + ".log");
  INFO(logs);
  REQUIRE(codes == std::vector<int>(static_cast<size_t>(world), 0));
  std::vector<Results> out;
  for (int64_t r = 0; r < world; ++r) {
    std::ifstream in(dir + "/out." + std::to_string(r), std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    REQUIRE_FALSE(bytes.empty());
    Results res;
    for (const auto& kv : torch::pickle_load(bytes).toGenericDict())
      res[kv.key().toStringRef()] = kv.value().toTensor();
    out.push_back(std::move(res));
  }
  return cache[world] = std::move(out);
}

const torch::Tensor& get(const Results& r, const std::string& key) {
  INFO("result " << key);
  REQUIRE(r.count(key));
  return r.at(key);
}

/// Every rank's input `name`, stacked along a new first dimension.
torch::Tensor stacked(const std::string& name, int64_t world) {
  std::vector<torch::Tensor> v;
  for (int64_t r = 0; r < world; ++r) v.push_back(pg_input(name, r, world));
  return torch::stack(v);
}

/// The reduction of `x` over dim 0, computed in fp64 (int64 for integers), cast to `dtype`.
torch::Tensor reference(const torch::Tensor& x, const std::string& op, at::ScalarType dtype) {
  const bool integral = !at::isFloatingType(x.scalar_type());
  const auto wide = x.to(integral ? torch::kLong : torch::kDouble);
  torch::Tensor r;
  if (op == "sum") r = wide.sum(0);
  if (op == "max") r = std::get<0>(wide.max(0));
  if (op == "min") r = std::get<0>(wide.min(0));
  if (op == "mean") r = wide.sum(0) / static_cast<double>(x.size(0));
  return r.to(dtype);
}

/// Same dtype and values: exact for integers, within `rtol` (relative) otherwise.
void check_values(const torch::Tensor& got, const torch::Tensor& want, double rtol) {
  INFO("got " << got << "\nwant " << want);
  REQUIRE(got.scalar_type() == want.scalar_type());
  REQUIRE(got.sizes() == want.sizes());
  if (!at::isFloatingType(got.scalar_type())) {
    CHECK(torch::equal(got, want));
    return;
  }
  CHECK(torch::allclose(got.to(torch::kDouble), want.to(torch::kDouble), rtol, 0.0));
}

/// Bit-for-bit equality of two tensors of the same 16-bit dtype.
bool same_bits(const torch::Tensor& a, const torch::Tensor& b) {
  return a.scalar_type() == b.scalar_type() &&
         torch::equal(a.contiguous().view(torch::kShort), b.contiguous().view(torch::kShort));
}

double rtol_for(at::ScalarType t) {
  if (t == torch::kBFloat16) return 1.0 / 128;  // one bf16 rounding of an fp32 result
  if (t == torch::kHalf) return 1.0 / 1024;
  if (t == torch::kFloat) return 1e-6;
  return 1e-12;
}

const std::map<std::string, at::ScalarType> kDtypes = {{"f32", torch::kFloat},
                                                       {"f64", torch::kDouble},
                                                       {"i64", torch::kLong},
                                                       {"bf16", torch::kBFloat16},
                                                       {"f16", torch::kHalf}};

ClusterEnv world_of_one() {
  ClusterEnv env;
  env.port = volt::detail::find_free_port();
  return env;
}

}  // namespace

// ---- a world of 1, in this process ----

TEST_CASE("ProcessGroup of one rank: collectives leave or copy the data", "[unit][process_group]") {
  ProcessGroup pg(world_of_one(), {});
  CHECK(pg.rank() == 0);
  CHECK(pg.size() == 1);
  CHECK(pg.backend() == "gloo");
  CHECK(pg.global_rank(0) == 0);

  for (auto op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Mean}) {
    auto t = torch::tensor({1.5f, -2.0f, 3.0f});
    pg.all_reduce(t, op);
    CHECK(torch::equal(t, torch::tensor({1.5f, -2.0f, 3.0f})));  // Mean of one rank: no division
  }
  auto h = torch::tensor({0.1f, 1e30f}).to(torch::kBFloat16);
  const auto h0 = h.clone();
  pg.all_reduce(h, ReduceOp::Mean);
  CHECK(same_bits(h, h0));
  CHECK_FALSE(pg.all_reduce_async(h, ReduceOp::Sum).valid());  // nothing to wait for

  auto flat = torch::zeros({2, 2});
  pg.all_gather(flat, torch::tensor({1.0f, 2.0f, 3.0f, 4.0f}));
  CHECK(torch::equal(flat, torch::tensor({1.0f, 2.0f, 3.0f, 4.0f}).view({2, 2})));
  auto list = pg.all_gather_list(torch::tensor({7, 8}));
  REQUIRE(list.size() == 1);
  CHECK(torch::equal(list[0], torch::tensor({7, 8})));

  auto shard = torch::zeros({3});
  pg.reduce_scatter(shard, torch::tensor({4.0f, 5.0f, 6.0f}), ReduceOp::Mean);
  CHECK(torch::equal(shard, torch::tensor({4.0f, 5.0f, 6.0f})));

  auto b = torch::tensor({9, 10});
  pg.broadcast(b, 0);
  CHECK(torch::equal(b, torch::tensor({9, 10})));
  pg.barrier();
  CHECK(pg.bytes_sent() == 0);  // nothing left this rank

  // Default work: nothing pending, wait() is a no-op.
  CollectiveWork none;
  CHECK_FALSE(none.valid());
  CHECK_NOTHROW(none.wait());
  int ran = 0;
  CollectiveWork finish_only({}, "x", [&] { ++ran; });
  CHECK(finish_only.valid());
  finish_only.wait();
  finish_only.wait();
  CHECK(ran == 1);  // the finishing step runs once
}

TEST_CASE("ProcessGroup checks sizes, backends and sub-group membership", "[unit][process_group]") {
  ProcessGroup pg(world_of_one(), {});
  {  // a Mean of integers would truncate: refused on every rank, whatever the world size
    auto counts = torch::ones({3}, torch::kLong);
    CHECK_THROWS_AS(pg.all_reduce(counts, ReduceOp::Mean), DistributedError);
    CHECK_NOTHROW(pg.all_reduce(counts, ReduceOp::Sum));
  }
  auto flat = torch::zeros({5});
  try {
    pg.all_gather(flat, torch::zeros({4}));
    FAIL("no error");
  } catch (const DistributedError& e) {
    CHECK_THAT(e.what(), Catch::Matchers::Contains("all_gather") && Catch::Matchers::Contains("expected 4"));
  }
  auto shard = torch::zeros({2});
  CHECK_THROWS_AS(pg.reduce_scatter(shard, torch::zeros({3}), ReduceOp::Sum), DistributedError);

  ProcessGroup sub(pg, {0}, "solo");
  CHECK(sub.size() == 1);
  CHECK(sub.rank() == 0);
  CHECK(sub.backend() == "gloo");
  auto t = torch::ones({2});
  sub.all_reduce(t, ReduceOp::Sum);
  CHECK(torch::equal(t, torch::ones({2})));
  try {
    ProcessGroup other(pg, {1}, "elsewhere");
    FAIL("no error");
  } catch (const DistributedError& e) {
    CHECK_THAT(e.what(), Catch::Matchers::Contains("not in sub-group 'elsewhere'"));
  }

  ProcessGroupOptions mpi;
  mpi.backend = "mpi";
  try {
    ProcessGroup bad(world_of_one(), mpi);
    FAIL("no error");
  } catch (const DistributedError& e) {
    CHECK_THAT(e.what(), Catch::Matchers::Contains("backend 'mpi' is not available"));
  }
}

TEST_CASE("ProcessGroup reports a rendezvous nobody answers as a DistributedError", "[unit][process_group]") {
  ClusterEnv env;
  env.rank = 1;  // a client: rank 0 (the store) never comes
  env.world_size = 2;
  env.port = volt::detail::find_free_port();
  ProcessGroupOptions o;
  o.timeout = std::chrono::milliseconds(1500);
  try {
    ProcessGroup pg(env, o);
    FAIL("no error");
  } catch (const DistributedError& e) {
    CHECK_THAT(e.what(), Catch::Matchers::Contains("rendezvous failed on rank 1 of 2"));
  }
}

// ---- worlds of 2 and 3 separate processes ----

TEST_CASE("ProcessGroup all_reduce across processes: Sum, Max, Min and Mean on every dtype",
          "[unit][process_group][multirank]") {
  const int64_t world = GENERATE(2, 3);
  const auto& res = scenario(world);
  for (int64_t rank = 0; rank < world; ++rank)
    for (std::string op : {"sum", "max", "min", "mean"})
      for (const auto& [dtype, st] : kDtypes) {
        if (dtype == "i64" && op == "mean") continue;
        INFO("world " << world << " rank " << rank << " " << op << " " << dtype);
        // Mean on Gloo is SUM then divide; bf16/fp16 are reduced in fp32 and keep their dtype.
        check_values(get(res[rank], "all_reduce/" + op + "/" + dtype), reference(stacked(dtype, world), op, st),
                     rtol_for(st));
      }
  for (int64_t rank = 0; rank < world; ++rank) {
    INFO("world " << world << " rank " << rank);
    // A non-contiguous target is reduced in place (through a contiguous copy).
    check_values(get(res[rank], "all_reduce/sum/f32_noncontig"),
                 reference(stacked("f32", world), "sum", torch::kFloat).view({2, 3}), 1e-6);
    check_values(get(res[rank], "all_reduce_async/mean/f32"), reference(stacked("f32", world), "mean", torch::kFloat),
                 1e-6);
  }
  // The values are not trivial: the ops disagree, and bf16 carried a value fp16 cannot hold.
  CHECK_FALSE(torch::equal(get(res[0], "all_reduce/sum/f32"), get(res[0], "all_reduce/mean/f32")));
  CHECK_FALSE(torch::equal(get(res[0], "all_reduce/max/f32"), get(res[0], "all_reduce/min/f32")));
  CHECK(get(res[0], "all_reduce/sum/bf16")[4].item<double>() == Approx(1e30 * world * (world + 1) / 2).epsilon(1e-2));
}

TEST_CASE("ProcessGroup all_gather across processes: one flat buffer in rank order, bf16 bit for bit",
          "[unit][process_group][multirank]") {
  const int64_t world = GENERATE(2, 3);
  const auto& res = scenario(world);
  const auto want_f32 = stacked("gather_f32", world);
  const auto want_bf16 = stacked("gather_bf16", world).view(-1);
  for (int64_t rank = 0; rank < world; ++rank) {
    INFO("world " << world << " rank " << rank);
    check_values(get(res[rank], "all_gather/f32"), want_f32.view(-1), 0);
    check_values(get(res[rank], "all_gather_async/f32"), want_f32, 0);
    check_values(get(res[rank], "all_gather_list"), want_f32.view({world, 1, 3}), 0);
    // Gloo cannot send bf16: volt sends the bits as fp16; 1e30 and -3e38 would not survive a cast.
    const auto& got = get(res[rank], "all_gather/bf16");
    CHECK(same_bits(got, want_bf16));
    CHECK(got[0].item<double>() == Approx(1e30).epsilon(1e-2));
    CHECK(got[2].item<double>() == Approx(-3e38).epsilon(1e-2));
  }
}

TEST_CASE("ProcessGroup reduce_scatter across processes: each rank its reduced chunk (Gloo: all-to-all + sum)",
          "[unit][process_group][multirank]") {
  const int64_t world = GENERATE(2, 3);
  const auto& res = scenario(world);
  for (std::string dtype : {"f32", "bf16"})
    for (std::string op : {"sum", "mean"}) {
      const auto st = kDtypes.at(dtype);
      const auto full = reference(stacked("scatter_" + dtype, world), op, st);
      for (int64_t rank = 0; rank < world; ++rank) {
        INFO("world " << world << " rank " << rank << " " << op << " " << dtype);
        check_values(get(res[rank], "reduce_scatter/" + op + "/" + dtype), full.narrow(0, 4 * rank, 4), rtol_for(st));
      }
    }
}

TEST_CASE("ProcessGroup broadcast across processes: from any rank, non-contiguous targets, bf16 bits",
          "[unit][process_group][multirank]") {
  const int64_t world = GENERATE(2, 3);
  const auto& res = scenario(world);
  for (int64_t src : {int64_t{0}, world - 1}) {
    const std::string s = src == 0 ? "src0" : "srclast";
    for (int64_t rank = 0; rank < world; ++rank) {
      INFO("world " << world << " rank " << rank << " from " << src);
      check_values(get(res[rank], "broadcast/" + s + "/f32"), pg_input("bcast_f32", src, world), 0);
      CHECK(same_bits(get(res[rank], "broadcast/" + s + "/bf16"), pg_input("bcast_bf16", src, world)));
      check_values(get(res[rank], "broadcast/" + s + "/i64"), pg_input("bcast_i64", src, world), 0);
    }
  }
}

TEST_CASE("ProcessGroup across processes: errors, bytes sent and barrier", "[unit][process_group][multirank]") {
  const int64_t world = GENERATE(2, 3);
  const auto& res = scenario(world);
  for (int64_t rank = 0; rank < world; ++rank) {
    INFO("world " << world << " rank " << rank);
    // all_gather and reduce_scatter size checks, reduce_scatter's op check, sub-group membership.
    CHECK(torch::equal(get(res[rank], "errors"), torch::tensor({1, 1, 1, 1}, torch::kLong)));
    // all_reduce 8 floats: 2(N-1)/N of 32 bytes; all_gather 3 floats and reduce_scatter 4 floats
    // per rank: (N-1) chunks; broadcast of 16 bytes: sent by the source only.
    const std::vector<int64_t> bytes = {2 * 32 * (world - 1) / world, 12 * (world - 1), 16 * (world - 1),
                                        rank == 0 ? 16 : 0};
    CHECK(torch::equal(get(res[rank], "bytes"), torch::tensor(bytes)));
  }
  // The barrier held rank 0 until the last rank arrived, 300 ms late.
  CHECK(get(res[0], "barrier_ms").item<double>() >= 200.0);
  // Communication time on rank 0 (busy, blocked, hidden, bytes): the async all_reduce ran ~200 ms
  // while rank 0 did something else, and was done when it waited; the synchronous one was all wait.
  const auto overlap = get(res[0], "comm_overlap");
  const auto exposed = get(res[0], "comm_exposed");
  const double bytes = 2.0 * 4096 * static_cast<double>(world - 1) / static_cast<double>(world);
  CHECK(overlap[0].item<double>() >= 0.15);
  CHECK(overlap[1].item<double>() < 0.1);
  CHECK(overlap[2].item<double>() >= 0.1);
  CHECK(overlap[3].item<double>() == std::floor(bytes));
  CHECK(exposed[0].item<double>() >= 0.15);
  CHECK(exposed[1].item<double>() >= 0.15);
  CHECK(exposed[2].item<double>() < 0.05);
  CHECK(exposed[3].item<double>() == std::floor(bytes));
}

TEST_CASE("ProcessGroup sub-groups across processes: ranks, global ranks and collectives within the group",
          "[unit][process_group][multirank]") {
  const int64_t world = GENERATE(2, 3);
  const auto& res = scenario(world);
  for (int64_t rank = 0; rank < world; ++rank) {
    INFO("world " << world << " rank " << rank);
    std::vector<int64_t> parity, all;
    for (int64_t i = rank % 2; i < world; i += 2) parity.push_back(i);
    for (int64_t i = 0; i < world; ++i) all.push_back(i);
    const std::vector<std::pair<std::string, std::vector<int64_t>>> groups = {{"parity", parity}, {"all", all}};
    for (const auto& [prefix, members] : groups) {
      INFO(prefix);
      const int64_t size = static_cast<int64_t>(members.size());
      const int64_t index = std::find(members.begin(), members.end(), rank) - members.begin();
      CHECK(torch::equal(get(res[rank], prefix + "/rank_size"), torch::tensor({index, size})));
      CHECK(torch::equal(get(res[rank], prefix + "/globals"), torch::tensor(members)));
      float sum = 0;
      std::vector<float> gather;
      for (int64_t g : members) {
        sum += static_cast<float>(g + 1);
        gather.push_back(10.0f * static_cast<float>(g));
      }
      CHECK(get(res[rank], prefix + "/sum").item<float>() == sum);
      CHECK(torch::equal(get(res[rank], prefix + "/gather"), torch::tensor(gather)));
      CHECK(get(res[rank], prefix + "/bcast").item<float>() == 100.0f + static_cast<float>(members.back()));
    }
  }
}
