// One rank of the process-group scenario (see tests/distributed/process_group_scenario.h): volt's
// ProcessGroup collectives over Gloo, between separate processes, results written for the test.
#include "distributed/process_group_scenario.h"

#include <chrono>
#include <fstream>
#include <iostream>
#include <thread>

#include "volt/core/errors.h"
#include "volt/distributed/cluster_env.h"
#include "volt/distributed/process_group.h"

namespace volt::testing {

namespace {

/// 1 when `f` throws a DistributedError whose message contains `needle`, else 0.
template <class F>
int64_t throws_distributed(F f, const std::string& needle) {
  try {
    f();
  } catch (const DistributedError& e) {
    return std::string(e.what()).find(needle) != std::string::npos ? 1 : 0;
  }
  return 0;
}

/// The collectives of one sub-group: each rank's sizes and mapping, then a sum, a gather and a
/// broadcast from the group's last rank of values made from the global rank.
void subgroup_results(ProcessGroup& g, int64_t global, const std::string& prefix,
                      c10::Dict<std::string, at::Tensor>& r) {
  r.insert(prefix + "/rank_size", torch::tensor({g.rank(), g.size()}));
  std::vector<int64_t> globals;
  for (int64_t i = 0; i < g.size(); ++i) globals.push_back(g.global_rank(i));
  r.insert(prefix + "/globals", torch::tensor(globals));
  auto sum = torch::tensor({static_cast<float>(global + 1)});
  g.all_reduce(sum, ReduceOp::Sum);
  r.insert(prefix + "/sum", sum);
  auto flat = torch::empty({g.size()});
  g.all_gather(flat, torch::tensor({10.0f * static_cast<float>(global)}));
  r.insert(prefix + "/gather", flat);
  auto b = torch::tensor({100.0f + static_cast<float>(global)});
  g.broadcast(b, g.size() - 1);
  r.insert(prefix + "/bcast", b);
  g.barrier("end of " + prefix);
}

}  // namespace

int run_process_group_scenario(const std::string& out) {
  try {
    torch::set_num_threads(1);
    const ClusterEnv env = ClusterEnv::detect();
    const int64_t me = env.rank, n = env.world_size;
    ProcessGroupOptions po;
    po.timeout = std::chrono::seconds(60);  // a stuck peer fails the test instead of hanging it
    ProcessGroup pg(env, po);
    c10::Dict<std::string, at::Tensor> r;
    auto input = [&](const std::string& name) { return pg_input(name, me, n); };

    // all_reduce: every op on every dtype (Mean on Gloo: SUM, then divide; half types in fp32).
    const std::vector<std::pair<std::string, ReduceOp>> ops = {
        {"sum", ReduceOp::Sum}, {"max", ReduceOp::Max}, {"min", ReduceOp::Min}, {"mean", ReduceOp::Mean}};
    for (const auto& [op_name, op] : ops)
      for (std::string dtype : {"f32", "f64", "i64", "bf16", "f16"}) {
        if (dtype == "i64" && op == ReduceOp::Mean) continue;
        auto t = input(dtype);
        pg.all_reduce(t, op);
        r.insert("all_reduce/" + op_name + "/" + dtype, t);
      }
    {  // a non-contiguous view is reduced in place through a contiguous copy
      auto base = input("f32").view({2, 3});
      auto view = base.t();
      pg.all_reduce(view, ReduceOp::Sum);
      r.insert("all_reduce/sum/f32_noncontig", base);
      auto t = input("f32");
      auto work = pg.all_reduce_async(t, ReduceOp::Mean);
      work.wait();
      r.insert("all_reduce_async/mean/f32", t);
    }

    // all_gather into one flat buffer (Gloo: a list all-gather into views of it).
    for (std::string dtype : {"f32", "bf16"}) {
      auto shard = input("gather_" + dtype);
      auto flat = torch::full({n * shard.numel()}, -1.0, shard.options());
      pg.all_gather(flat, shard);
      r.insert("all_gather/" + dtype, flat);
    }
    {
      auto shard = input("gather_f32");
      auto flat = torch::zeros({n, shard.numel()});  // 2-d output: filled through its flat view
      auto work = pg.all_gather_async(flat, shard);
      work.wait();
      r.insert("all_gather_async/f32", flat);
      auto list = pg.all_gather_list(input("gather_f32").view({1, 3}));
      r.insert("all_gather_list", torch::stack(list));
    }

    // reduce_scatter (Gloo: all-to-all of the chunks, then a local fp32 sum).
    for (std::string dtype : {"f32", "bf16"})
      for (const auto& [op_name, op] : ops) {
        if (op != ReduceOp::Sum && op != ReduceOp::Mean) continue;
        auto full = input("scatter_" + dtype);
        auto shard = torch::full({4}, -1.0, full.options());
        pg.reduce_scatter(shard, full, op);
        r.insert("reduce_scatter/" + op_name + "/" + dtype, shard);
      }

    // broadcast from the first and from the last rank; bf16 bits; a non-contiguous target.
    for (int64_t src : {int64_t{0}, n - 1}) {
      const std::string s = src == 0 ? "src0" : "srclast";
      auto base = input("bcast_f32");
      auto view = base.t();
      pg.broadcast(view, src);
      r.insert("broadcast/" + s + "/f32", base);
      for (std::string dtype : {"bf16", "i64"}) {
        auto t = input("bcast_" + dtype);
        pg.broadcast(t, src);
        r.insert("broadcast/" + s + "/" + dtype, t);
      }
    }

    // Misuse: wrong sizes fail before any traffic; reduce_scatter supports sum and mean only;
    // a rank cannot create a sub-group it is not in.
    std::vector<int64_t> others;
    for (int64_t i = 0; i < n; ++i)
      if (i != me) others.push_back(i);
    auto gather_bad = torch::empty({n * 3 + 1});
    auto scatter_bad = torch::empty({3});
    auto scatter_max = torch::empty({4});
    r.insert("errors",
             torch::tensor({
                 throws_distributed([&] { pg.all_gather(gather_bad, input("gather_f32")); }, "expected"),
                 throws_distributed([&] { pg.reduce_scatter(scatter_bad, input("scatter_f32"), ReduceOp::Sum); },
                                    "expected"),
                 throws_distributed([&] { pg.reduce_scatter(scatter_max, input("scatter_f32"), ReduceOp::Max); },
                                    "only sum and mean"),
                 throws_distributed([&] { ProcessGroup bad(pg, others, "not_mine"); }, "not in sub-group"),
             }));

    // Bytes this rank sends: all_reduce 2(N-1)/N of the data, all_gather and reduce_scatter
    // (N-1)/N of the full buffer, broadcast the whole tensor from the source only.
    std::vector<int64_t> bytes;
    auto count = [&](auto f) {
      pg.reset_bytes_sent();
      f();
      bytes.push_back(pg.bytes_sent());
    };
    count([&] {
      auto t = torch::ones({8});
      pg.all_reduce(t, ReduceOp::Sum);
    });
    count([&] {
      auto flat = torch::empty({n * 3});
      pg.all_gather(flat, input("gather_f32"));
    });
    count([&] {
      auto shard = torch::empty({4});
      pg.reduce_scatter(shard, input("scatter_f32"), ReduceOp::Sum);
    });
    count([&] {
      auto t = torch::ones({4});
      pg.broadcast(t, 0);
    });
    r.insert("bytes", torch::tensor(bytes));

    // barrier: rank 0 waits for the last rank, which arrives 300 ms late.
    pg.barrier("align");
    if (me == n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const auto t0 = std::chrono::steady_clock::now();
    pg.barrier("late");
    const double waited = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    r.insert("barrier_ms", torch::tensor({waited}, torch::kDouble));

    // Communication time. Overlapped: the last rank joins an async all_reduce 200 ms late while rank
    // 0 "computes" for 400 ms before waiting, so rank 0's collective ran ~200 ms, hidden. Exposed:
    // the same with a synchronous all_reduce, all of it waited for.
    auto timed = [&](bool overlap) {
      pg.barrier("comm_align");
      pg.reset_comm_stats();
      auto t = torch::ones({1024});
      if (me == n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (overlap) {
        CollectiveWork w = pg.all_reduce_async(t, ReduceOp::Sum);
        if (me == 0) std::this_thread::sleep_for(std::chrono::milliseconds(400));
        w.wait();
      } else {
        pg.all_reduce(t, ReduceOp::Sum);
      }
      const CommStats c = pg.comm_stats();
      return std::vector<double>{c.busy_seconds, c.blocked_seconds, c.hidden_seconds(),
                                 static_cast<double>(c.bytes_sent)};
    };
    r.insert("comm_overlap", torch::tensor(timed(true), torch::kDouble));
    r.insert("comm_exposed", torch::tensor(timed(false), torch::kDouble));

    // Sub-groups: the even and the odd ranks (every rank in exactly one), then all ranks.
    {
      std::vector<int64_t> mine;
      for (int64_t i = me % 2; i < n; i += 2) mine.push_back(i);
      ProcessGroup parity(pg, mine, me % 2 ? "odd" : "even");
      subgroup_results(parity, me, "parity", r);
    }
    {
      std::vector<int64_t> all;
      for (int64_t i = 0; i < n; ++i) all.push_back(i);
      ProcessGroup everyone(pg, all, "all");
      subgroup_results(everyone, me, "all", r);
    }
    pg.barrier("end");  // rank 0 hosts the store: nobody leaves while others still use it

    auto bytes_out = torch::pickle_save(c10::IValue(r));
    std::ofstream(out + "." + std::to_string(me), std::ios::binary)
        .write(bytes_out.data(), static_cast<std::streamsize>(bytes_out.size()));
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "process group scenario: error: " << e.what() << std::endl;
    return 1;
  }
}

}  // namespace volt::testing
