// EMAWeightAveraging and StochasticWeightAveraging with real rank processes (the test worker, Gloo
// over loopback): DDP(2) and FSDP(2) end with the single process's averaged weights, FSDP's
// averaged copy holds this rank's shards only, and a resumed fit equals the uninterrupted one.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <numeric>

#include "distributed/multi_rank.h"

using namespace volt;
using namespace volt::testing;

namespace {

/// An integer the worker wrote (-1 when absent).
int64_t worker_int(const std::string& path, const char* key) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(!bytes.empty());
  auto d = torch::pickle_load(bytes).toGenericDict();
  return d.contains(key) ? d.at(key).toInt() : -1;
}

std::string fsdp(const std::string& sharding, const std::string& state_dict_type = "full") {
  return "{name: fsdp, sharding_strategy: " + sharding + ", state_dict_type: " + state_dict_type +
         ", auto_wrap_policy: {module_types: [Block]}}";
}

/// 3 blocks of width 33 (flat sizes not divisible by the world size), 64 samples, a validation
/// loader; `averaging` "ema" (decay 0.5, every step) or "swa" (from the first epoch, lr 0.05).
std::map<std::string, std::string> averaging_kv(const std::string& root, const std::string& averaging, int64_t epochs) {
  auto kv = quiet_blocks_kv(root);
  kv["averaging"] = averaging;
  kv["swa_epoch_start"] = "1";
  kv["trainer.max_epochs"] = std::to_string(epochs);
  return kv;
}

struct Run {
  WorkerResult r;
  int64_t averaged_numel = -1, n_averaged = -1;
};

Run run_ok(const std::map<std::string, std::string>& kv, const std::string& dir) {
  REQUIRE(run_worker(args_for(dir + "/o.pt", kv), dir) == 0);
  Run out{read_worker_output(dir + "/o.pt")};
  out.averaged_numel = worker_int(dir + "/o.pt", "averaged_numel");
  out.n_averaged = worker_int(dir + "/o.pt", "n_averaged");
  return out;
}

int64_t sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

}  // namespace

TEST_CASE("weight averaging under DDP(2) and FSDP(2) ends with the single process's averaged weights",
          "[callbacks][weight_averaging][multirank]") {
  struct Case {
    std::string averaging, strategy;
    int64_t epochs;
  };
  const std::vector<Case> cases = {
      {"ema", "ddp", 2}, {"ema", fsdp("FULL_SHARD"), 2}, {"ema", fsdp("SHARD_GRAD_OP"), 2},
      {"swa", "ddp", 3}, {"swa", fsdp("FULL_SHARD"), 3},
  };
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.averaging << " " << c.strategy) {
      const std::string dir = temp_dir("wa_ranks");
      auto kv = averaging_kv(dir, c.averaging, c.epochs);
      kv["batch_size"] = "8";
      const Run single = run_ok(kv, dir);
      kv["batch_size"] = "4";
      kv["trainer.strategy"] = c.strategy;
      kv["trainer.devices"] = "2";
      const Run ranks = run_ok(kv, dir);

      int64_t params = 0;
      for (const auto& [k, v] : single.r.state) params += v.numel();
      CHECK(single.averaged_numel == params);
      CHECK(single.n_averaged == (c.averaging == "ema" ? 8 * c.epochs : c.epochs));
      CHECK(ranks.n_averaged == single.n_averaged);
      // As the strategies' own tests: the same computation up to fp32 summation order.
      CHECK(max_state_diff(ranks.r.state, single.r.state) < 2e-5);
      // Validation ran on the averaged weights on every rank.
      CHECK(ranks.r.val_loss == Approx(single.r.val_loss).epsilon(1e-5));
      if (c.strategy == "ddp") {
        CHECK(ranks.averaged_numel == params);
      } else {
        // This rank's shard of every unit, padding included: half of each padded flat buffer.
        REQUIRE(!ranks.r.padded.empty());
        CHECK(sum(ranks.r.numels) == params);
        CHECK(ranks.averaged_numel == sum(ranks.r.shard_numels));
        CHECK(2 * ranks.averaged_numel == sum(ranks.r.padded));
        CHECK(2 * ranks.averaged_numel < params + 2 * static_cast<int64_t>(ranks.r.padded.size()));
      }
    }
  }
}

TEST_CASE("weight averaging: a multi-rank fit stopped mid-epoch and resumed ends with the uninterrupted weights",
          "[callbacks][weight_averaging][resume][multirank]") {
  struct Case {
    std::string averaging, strategy;
    int64_t epochs, stop;
  };
  const std::vector<Case> cases = {
      {"ema", fsdp("FULL_SHARD", "sharded"), 2, 5},
      {"swa", fsdp("FULL_SHARD", "full"), 3, 13},
      {"swa", "ddp", 3, 13},
  };
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.averaging << " " << c.strategy << " stopped at step " << c.stop) {
      const std::string dir = temp_dir("wa_resume_ranks");
      auto kv = averaging_kv(dir + "/whole", c.averaging, c.epochs);
      kv["batch_size"] = "4";
      kv["trainer.strategy"] = c.strategy;
      kv["trainer.devices"] = "2";
      const Run whole = run_ok(kv, dir);

      kv["trainer.default_root_dir"] = dir + "/part";
      kv["trainer.enable_checkpointing"] = "true";
      kv["checkpoint_every_n_train_steps"] = std::to_string(c.stop);
      kv["trainer.max_steps"] = std::to_string(c.stop);
      const Run part = run_ok(kv, dir);
      REQUIRE(part.r.global_step == c.stop);
      CHECK(part.n_averaged > 0);  // the checkpoint holds an average in progress

      kv.erase("trainer.max_steps");
      kv["ckpt_path"] = "last";
      const Run resumed = run_ok(kv, dir);
      CHECK(resumed.r.global_step == whole.r.global_step);
      CHECK(resumed.n_averaged == whole.n_averaged);
      CHECK(max_state_diff(resumed.r.state, whole.r.state) == 0.0);
    }
  }
}
