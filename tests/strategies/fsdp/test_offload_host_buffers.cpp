// FSDP's cpu_offload keeps each unit's shard in an exact-size host buffer (core/host_buffers.h):
// the account holds one buffer per unit, their total the sum of this rank's (padded) shards, at 1
// and 2 processes, and nothing once the module is given back whole.
#include <torch/cuda.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "boring_model.h"
#include "distributed/multi_rank.h"
#include "volt/core/host_buffers.h"
#include "volt/strategies/fsdp/fsdp_strategy.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;

TEST_CASE("FSDP cpu_offload keeps its shards in exact host buffers: their total is the shards' sum",
          "[fsdp][host_buffers]") {
  const HostBufferStats before = host_buffer_stats("fsdp.shard");
  torch::manual_seed(3);
  BoringOptions bo;
  bo.blocks = 3;
  bo.hidden = 33;  // flat sizes that are not multiples of anything
  auto model = std::make_shared<BoringModel>(bo);
  BoringModel& m = *model;
  auto o = quiet_options(temp_dir("host-buffers-fsdp"));
  o.strategy = "fsdp";
  o.strategy.fsdp.auto_wrap_policy.module_types = {"Block"};
  o.strategy.fsdp.cpu_offload = true;
  DataLoader loader(std::make_shared<RandomDataset>(16), DataLoaderOptions{8, false, false, 0});
  {
    Trainer t(o);
    t.fit(m, loader);
    auto& fsdp = dynamic_cast<FSDPStrategy&>(t.strategy());
    const auto units = fsdp.units();
    REQUIRE(units.size() == 4);
    int64_t shard_bytes = 0, held = 0;
    for (const auto& u : units) {
      CHECK(static_cast<int64_t>(u.shard_bytes) == u.shard_numel * 4);
      shard_bytes += static_cast<int64_t>(u.shard_bytes);
      held += host_pages_bytes(static_cast<int64_t>(u.shard_bytes));
    }
    const HostBufferStats s = host_buffer_stats("fsdp.shard");
    CHECK(s.buffers - before.buffers == 4);
    CHECK(s.requested - before.requested == shard_bytes);
    CHECK(s.held - before.held == held);
    fsdp.unshard_module(m);  // the module holds ordinary tensors again
  }
  // The Trainer (its optimizer held views of the shards) is gone: every buffer is freed and
  // un-counted.
  CHECK(host_buffer_stats("fsdp.shard").buffers == before.buffers);
  CHECK(host_buffer_stats("fsdp.shard").requested == before.requested);
  CHECK(host_buffer_stats("fsdp.shard").held == before.held);
}

TEST_CASE("FSDP cpu_offload on 2 processes: each rank's exact host buffers are its padded shards",
          "[fsdp][host_buffers][multirank]") {
  const std::string dir = temp_dir("host-buffers-2");
  auto kv = quiet_blocks_kv(dir);
  kv["batch_size"] = "4";
  kv["trainer.devices"] = "2";
  kv["trainer.strategy"] = "{name: fsdp, cpu_offload: true, auto_wrap_policy: {module_types: [Block]}}";
  REQUIRE(run_worker(args_for(dir + "/o.pt", kv), dir) == 0);
  WorkerResult r = read_worker_output(dir + "/o.pt");
  REQUIRE(r.shard_numels.size() == 4);
  int64_t bytes = 0, held = 0;
  for (size_t u = 0; u < r.shard_numels.size(); ++u) {
    CHECK(r.shard_numels[u] * 2 == r.padded[u]);
    bytes += r.shard_numels[u] * 4;
    held += host_pages_bytes(r.shard_numels[u] * 4);
  }
  CHECK(r.host_shard_buffers == 4);
  CHECK(r.host_shard_requested == bytes);
  CHECK(r.host_shard_held == held);
}
