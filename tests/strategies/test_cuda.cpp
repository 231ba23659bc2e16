// CUDA paths (run on the GPU machine by scripts/gpu.sh; on a machine without a GPU each case says
// so and passes). One GPU: multi-rank runs put Gloo ranks on the same device (NCCL refuses two
// ranks on one GPU); NCCL itself runs at world size 1.
#include <torch/cuda.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cmath>

#include "distributed/multi_rank.h"
#include "gpu_visibility.h"

using namespace volt;
using namespace volt::testing;

namespace {
std::map<std::string, std::string> base(const std::string& root) { return quiet_blocks_kv(root); }
const char* kFsdp = "{name: fsdp, sharding_strategy: FULL_SHARD, auto_wrap_policy: {module_types: [Block]}";
struct Case {
  std::string name, strategy;
  int devices;
};
}  // namespace

TEST_CASE("CUDA: DDP and FSDP on GPU tensors match single-process CPU training", "[cuda][multirank]") {
  if (no_cuda()) return;
  const std::vector<Case> cases = {
      {"FSDP FULL_SHARD, 2 Gloo ranks on one GPU", std::string(kFsdp) + "}", 2},
      {"DDP, 2 Gloo ranks on one GPU", "ddp", 2},
      {"FSDP FULL_SHARD, NCCL at world size 1", std::string(kFsdp) + ", process_group_backend: nccl}", 1},
      {"FSDP FULL_SHARD with CPU offload, 2 ranks", std::string(kFsdp) + ", cpu_offload: true}", 2},
      {"FSDP FULL_SHARD with CPU offload, NCCL at world size 1",
       std::string(kFsdp) + ", cpu_offload: true, process_group_backend: nccl}", 1},
      {"FSDP SHARD_GRAD_OP with activation checkpointing, 2 ranks",
       "{name: fsdp, sharding_strategy: SHARD_GRAD_OP, auto_wrap_policy: {module_types: [Block]}, "
       "activation_checkpointing_policy: {module_types: [Block]}}",
       2},
  };
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.name) {
      const std::string dir = temp_dir("cuda");
      auto kv = base(dir);
      kv["adam"] = "true";
      kv["lr"] = "0.01";
      auto single_kv = kv;
      single_kv["batch_size"] = std::to_string(4 * c.devices);
      WorkerResult single = train_single(single_kv);  // on the CPU
      kv["batch_size"] = "4";
      kv["trainer.accelerator"] = "cuda";
      kv["trainer.strategy"] = c.strategy;
      kv["trainer.devices"] = std::to_string(c.devices);
      REQUIRE(run_worker(args_for(dir + "/o.pt", kv), dir) == 0);
      WorkerResult r = read_worker_output(dir + "/o.pt");
      REQUIRE(r.losses.size() == single.losses.size());
      for (size_t i = 0; i < r.losses.size(); ++i) CHECK(r.losses[i] == Approx(single.losses[i]).epsilon(1e-4));
      CHECK(max_state_diff(r.state, single.state) < 1e-3);
    }
  }
}

TEST_CASE("CUDA: activation checkpointing with dropout reproduces the plain run exactly", "[cuda][ac]") {
  if (no_cuda()) return;
  const std::string dir = temp_dir("cuda-ac");
  auto kv = base(dir);
  kv["dropout"] = "0.3";
  kv["batch_size"] = "8";
  kv["trainer.accelerator"] = "cuda";
  kv["trainer.strategy"] = "{name: single_device}";
  REQUIRE(run_worker(args_for(dir + "/plain.pt", kv), dir) == 0);
  kv["trainer.strategy"] = "{name: single_device, activation_checkpointing_policy: {module_types: [Block]}}";
  REQUIRE(run_worker(args_for(dir + "/ac.pt", kv), dir) == 0);
  auto plain = read_worker_output(dir + "/plain.pt"), ac = read_worker_output(dir + "/ac.pt");
  REQUIRE(plain.losses.size() == ac.losses.size());
  for (size_t i = 0; i < plain.losses.size(); ++i) CHECK(ac.losses[i] == Approx(plain.losses[i]).epsilon(1e-6));
  CHECK(max_state_diff(plain.state, ac.state) < 1e-6);
}

TEST_CASE("CUDA: FSDP checkpoints (full and sharded, with offload) resume bitwise, CUDA RNG included",
          "[cuda][checkpoint]") {
  if (no_cuda()) return;
  const std::vector<Case> cases = {
      {"sharded, 2 Gloo ranks on one GPU", std::string(kFsdp) + ", state_dict_type: sharded}", 2},
      {"full, NCCL at world size 1", std::string(kFsdp) + ", process_group_backend: nccl}", 1},
      {"sharded, CPU offload, 2 ranks", std::string(kFsdp) + ", state_dict_type: sharded, cpu_offload: true}", 2},
  };
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.name) {
      const std::string dir = temp_dir("cuda-ckpt");
      auto kv = base(dir + "/whole");
      kv["adam"] = "true";
      kv["lr"] = "0.01";
      kv["dropout"] = "0.1";  // CUDA generator state must be restored for a bitwise continuation
      kv["batch_size"] = std::to_string(8 / c.devices);
      kv["trainer.accelerator"] = "cuda";
      kv["trainer.strategy"] = c.strategy;
      kv["trainer.devices"] = std::to_string(c.devices);
      REQUIRE(run_worker(args_for(dir + "/o.pt", kv), dir) == 0);
      const WorkerResult whole = read_worker_output(dir + "/o.pt");
      kv["trainer.default_root_dir"] = dir + "/part";
      kv["trainer.enable_checkpointing"] = "true";
      kv["checkpoint_every_n_train_steps"] = "5";
      kv["trainer.max_steps"] = "5";
      REQUIRE(run_worker(args_for(dir + "/o.pt", kv), dir) == 0);
      kv.erase("trainer.max_steps");
      kv["ckpt_path"] = "last";
      REQUIRE(run_worker(args_for(dir + "/o.pt", kv), dir) == 0);
      const WorkerResult resumed = read_worker_output(dir + "/o.pt");
      REQUIRE(resumed.losses.size() + 5 == whole.losses.size());
      for (size_t i = 0; i < resumed.losses.size(); ++i) CHECK(resumed.losses[i] == whole.losses[5 + i]);
      CHECK(max_state_diff(resumed.state, whole.state) == 0.0);
    }
  }
}

TEST_CASE("CUDA: 16-mixed with the collective gradient scaler trains like fp32 on one device, DDP and FSDP",
          "[cuda][precision]") {
  if (no_cuda()) return;
  const std::string root = temp_dir("cuda-fp16");
  auto kv = base(root);
  kv["adam"] = "true";
  kv["lr"] = "0.01";
  auto single_kv = kv;
  single_kv["batch_size"] = "8";
  const WorkerResult fp32 = train_single(single_kv);  // on the CPU, fp32
  auto run = [&](const std::string& strategy, int devices) {
    const std::string dir = temp_dir("cuda-fp16-run");
    auto r = kv;
    r["trainer.default_root_dir"] = dir;
    r["batch_size"] = std::to_string(8 / devices);
    r["trainer.accelerator"] = "cuda";
    r["trainer.precision"] = "16-mixed";
    r["trainer.strategy"] = strategy;
    r["trainer.devices"] = std::to_string(devices);
    REQUIRE(run_worker(args_for(dir + "/o.pt", r), dir) == 0);
    return read_worker_output(dir + "/o.pt");
  };
  // One device: fp16 with loss scale 65536 overflows and skips a few early steps (as PyTorch's
  // GradScaler does), so it is compared with fp32 as training, not step for step.
  const WorkerResult one = run("auto", 1);
  REQUIRE(one.losses.size() == fp32.losses.size());
  auto mean = [](const std::vector<double>& v, size_t from, size_t n) {
    double s = 0;
    for (size_t i = from; i < from + n; ++i) s += v[i];
    return s / static_cast<double>(n);
  };
  const size_t n = one.losses.size();
  for (double l : one.losses) CHECK(std::isfinite(l));
  CHECK(mean(one.losses, n - 4, 4) < mean(one.losses, 0, 4));
  CHECK(mean(one.losses, n - 4, 4) == Approx(mean(fp32.losses, n - 4, 4)).epsilon(0.25));
  for (const auto& [k, v] : one.state) CHECK(torch::isfinite(v).all().item<bool>());
  // DDP (fp32 gradient all-reduce) and FSDP at world 1: the skips are decided by all ranks
  // together, so the runs follow the single-device 16-mixed run step for step, up to rounding.
  const std::vector<Case> cases = {
      {"DDP, 2 Gloo ranks on one GPU", "ddp", 2},
      {"FSDP FULL_SHARD, NCCL at world size 1", std::string(kFsdp) + ", process_group_backend: nccl}", 1},
  };
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.name) {
      const WorkerResult r = run(c.strategy, c.devices);
      REQUIRE(r.losses.size() == n);
      for (size_t i = 0; i < n; ++i) CHECK(r.losses[i] == Approx(one.losses[i]).epsilon(2e-2));
      CHECK(max_state_diff(r.state, one.state) < 2e-2);
    }
  }
  // FSDP on 2 ranks reduces fp16 gradients: it may overflow (and skip) on other steps than one
  // device does, so it is compared as training.
  SECTION("FSDP FULL_SHARD (fp16 gathers and reduce-scatters), 2 ranks") {
    const WorkerResult r = run(std::string(kFsdp) + "}", 2);
    REQUIRE(r.losses.size() == n);
    for (double l : r.losses) CHECK(std::isfinite(l));
    CHECK(mean(r.losses, n - 4, 4) < mean(r.losses, 0, 4));
    CHECK(mean(r.losses, n - 4, 4) == Approx(mean(fp32.losses, n - 4, 4)).epsilon(0.25));
    for (const auto& [k, v] : r.state) CHECK(torch::isfinite(v).all().item<bool>());
  }
}
