// Asynchronous checkpoints (trainer.plugins: [AsyncCheckpointIO]): the writer in one process, then
// real rank processes (the test worker, Gloo over loopback) saving, failing and being killed.
#include <torch/torch.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <thread>

#include "checkpoint/checkpoint_support.h"
#include "distributed/multi_rank.h"
#include "volt/checkpoint/async_checkpoint_io.h"
#include "volt/checkpoint/checkpoint.h"
#include "volt/checkpoint/checkpoint_reader.h"
#include "volt/checkpoint/sharded_checkpoint.h"
#include "volt/checkpoint/tensor_archive.h"
#include "volt/core/errors.h"
#include "volt/core/files.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

/// One process: the collectives are identities.
class LocalComm : public StateComm {
 public:
  int64_t rank() const override { return 0; }
  int64_t world_size() const override { return 1; }
  torch::Tensor all_reduce(const torch::Tensor& t, ReduceOp) override { return t; }
  torch::Tensor broadcast(const torch::Tensor& t, int64_t) override { return t; }
};

/// Slows (or fails) the asynchronous writes of files whose path contains `match`; removed when done.
class WriteHook {
 public:
  WriteHook(std::string match, int delay_ms, bool fail = false) {
    volt::detail::set_deferred_write_hook([=](const std::string& path, int64_t written, int64_t total) {
      if (path.find(match) == std::string::npos) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      if (fail && written == total / 2) throw std::runtime_error("injected write fault");
    });
  }
  ~WriteHook() { volt::detail::set_deferred_write_hook({}); }
};

struct Model {
  std::vector<torch::Tensor> weights;
  StateLayout layout;
  explicit Model(float value) {
    for (int i = 0; i < 6; ++i) {
      weights.push_back(torch::full({64, 64}, value + static_cast<float>(i)));
      layout.params.emplace_back("w" + std::to_string(i), weights.back());
    }
  }
  void set(float value) {
    for (size_t i = 0; i < weights.size(); ++i) weights[i].fill_(value + static_cast<float>(i));
  }
};

CheckpointHeader header(int64_t step) {
  CheckpointHeader h;
  h.global_step = step;
  h.meta["loops"]["global_step"] = step;
  return h;
}

/// The value of "w0" in the checkpoint at `path`.
float saved_w0(const std::string& path) { return CheckpointReader(path).read(kModelSection, "w0")[0][0].item<float>(); }

std::map<std::string, std::string> resume_kv(const std::string& root, const std::string& strategy, int world) {
  auto kv = quiet_blocks_kv(root);
  kv["dropout"] = "0.1";
  kv["adam"] = "true";
  kv["lr"] = "0.01";
  kv["trainer.strategy"] = strategy;
  kv["trainer.devices"] = std::to_string(world);
  kv["batch_size"] = std::to_string(8 / world);
  kv["trainer.enable_checkpointing"] = "true";
  kv["checkpoint_every_n_train_steps"] = "2";
  return kv;
}

std::string fsdp(const std::string& state_dict_type) {
  return "{name: fsdp, sharding_strategy: FULL_SHARD, state_dict_type: " + state_dict_type +
         ", auto_wrap_policy: {module_types: [Block]}}";
}

std::map<std::string, std::string> async(std::map<std::string, std::string> kv) {
  kv["trainer.plugins"] = "[AsyncCheckpointIO]";
  return kv;
}

WorkerResult run_ok(const std::map<std::string, std::string>& kv, const std::string& dir) {
  REQUIRE(run_worker(args_for(dir + "/o.pt", kv), dir) == 0);
  return read_worker_output(dir + "/o.pt");
}

/// Two checkpoints hold the same tensors bitwise (model, optimizer, every rank's generators), the
/// same position and the same loop state.
void check_same_checkpoint(const std::string& a, const std::string& b) {
  INFO(a << " vs " << b);
  const Checkpoint x = load_checkpoint_file(a), y = load_checkpoint_file(b);
  CHECK(x.epoch == y.epoch);
  CHECK(x.global_step == y.global_step);
  check_same_tensors(x.state_dict, y.state_dict);
  check_same_tensors(x.optimizer_state, y.optimizer_state);
  check_same_tensors(x.rng_states, y.rng_states);
  CHECK(YAML::Dump(x.meta["loops"]) == YAML::Dump(y.meta["loops"]));
  CHECK(YAML::Dump(x.meta["callbacks"]) != "");
}

/// No temporary file or unfinished folder in `dir`.
void check_no_leftovers(const std::string& dir) {
  for (const auto& e : fs::directory_iterator(dir)) {  // not recursive: see core/files.h
    const std::string name = e.path().filename().string();
    CHECK(name.find(".tmp.") == std::string::npos);
    CHECK(name.find(".partial") == std::string::npos);
  }
}

}  // namespace

TEST_CASE("an asynchronous save writes the state of its moment while training goes on, and the next save waits",
          "[checkpoint][async_checkpoint]") {
  const std::string dir = temp_dir("async-two");
  LocalComm comm;
  Model m(1.0f);
  AsyncCheckpointIO io;
  const std::string a = dir + "/a.ckpt", b = dir + "/b.ckpt";
  {
    WriteHook slow("a.ckpt", 100);  // about 0.7 s for the file
    const auto t0 = std::chrono::steady_clock::now();
    io.save(m.layout, header(1), a, CheckpointFormat::Full, comm);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(300));  // returned before the write
    CHECK(io.pending());
    CHECK_FALSE(fs::exists(a));  // nothing at the path until the file is whole
    m.set(5.0f);                 // training goes on: the copy aside is what gets written
    io.save(m.layout, header(2), b, CheckpointFormat::Full, comm);
    // The second save waited for the first: it is whole, with the values of its moment.
    REQUIRE(fs::exists(a));
    CHECK(saved_w0(a) == 1.0f);
    CHECK(CheckpointReader(a).read(kModelSection, "w5")[0][0].item<float>() == 6.0f);
  }
  m.set(9.0f);
  io.wait();
  CHECK_FALSE(io.pending());
  CHECK(saved_w0(b) == 5.0f);
  CHECK(CheckpointReader(b).global_step() == 2);
  check_no_leftovers(dir);
}

TEST_CASE("a failed asynchronous write reaches the training thread and keeps the previous checkpoint",
          "[checkpoint][async_checkpoint]") {
  const std::string dir = temp_dir("async-fail");
  LocalComm comm;
  Model m(1.0f);
  const std::string path = dir + "/last.ckpt", old = dir + "/epoch=0-step=1.ckpt";
  save_state(m.layout, header(1), path, CheckpointFormat::Full, comm);
  save_state(m.layout, header(1), old, CheckpointFormat::Full, comm);
  m.set(3.0f);
  AsyncCheckpointIO io;
  SECTION("at the wait") {
    WriteHook fail("last.ckpt", 0, /*fail=*/true);
    io.save(m.layout, header(2), path, CheckpointFormat::Full, comm);
    io.after_save([&] { volt::detail::remove_tree(old); });  // never run: its successor was not written
    const std::string e = checkpoint_error([&] { io.wait(); });
    CHECK_THAT(e, Contains(path) && Contains("injected write fault"));
  }
  SECTION("at the next save") {
    WriteHook fail("last.ckpt", 0, /*fail=*/true);
    io.save(m.layout, header(2), path, CheckpointFormat::Full, comm);
    const std::string e =
        checkpoint_error([&] { io.save(m.layout, header(3), dir + "/x.ckpt", CheckpointFormat::Full, comm); });
    CHECK_THAT(e, Contains(path) && Contains("injected write fault"));
    CHECK_FALSE(fs::exists(dir + "/x.ckpt"));
  }
  CHECK_FALSE(io.pending());
  CHECK(saved_w0(path) == 1.0f);  // the previous checkpoint, whole
  CHECK(CheckpointReader(path).global_step() == 1);
  CHECK(fs::exists(old));
  check_no_leftovers(dir);
  // The writer goes on after a failure: the next save works.
  io.save(m.layout, header(4), path, CheckpointFormat::Full, comm);
  io.wait();
  CHECK(saved_w0(path) == 3.0f);
}

TEST_CASE("removals queued behind an asynchronous save wait until it is whole", "[checkpoint][async_checkpoint]") {
  const std::string dir = temp_dir("async-remove");
  LocalComm comm;
  Model m(1.0f);
  const std::string old = dir + "/epoch=0-step=1.ckpt", next = dir + "/epoch=0-step=2.ckpt";
  save_state(m.layout, header(1), old, CheckpointFormat::Full, comm);
  AsyncCheckpointIO io;
  std::atomic<bool> removed{false};
  {
    WriteHook slow("step=2", 50);
    io.save(m.layout, header(2), next, CheckpointFormat::Full, comm);
    io.after_save([&] {
      CHECK(fs::exists(next));  // its successor is whole first
      volt::detail::remove_tree(old);
      removed = true;
    });
    CHECK(fs::exists(old));
    CHECK_FALSE(removed);
    io.wait();
  }
  CHECK(removed);
  CHECK_FALSE(fs::exists(old));
  CHECK(CheckpointReader(next).global_step() == 2);
  bool now = false;
  io.after_save([&] { now = true; });  // nothing pending: at once
  CHECK(now);
}

TEST_CASE("an asynchronous sharded save is complete only after the wait, or alone after an exception",
          "[checkpoint][async_checkpoint]") {
  const std::string dir = temp_dir("async-sharded");
  LocalComm comm;
  Model m(2.0f);
  const std::string path = dir + "/last.ckpt";
  save_state(m.layout, header(1), path, CheckpointFormat::Sharded, comm);
  m.set(4.0f);
  AsyncCheckpointIO io;
  io.save(m.layout, header(2), path, CheckpointFormat::Sharded, comm);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the rank file is written by now
  // The manifest and the marker wait for the ranks to agree: the previous folder is still in place.
  CHECK(CheckpointReader(path).global_step() == 1);
  SECTION("the wait completes it") { io.wait(); }
  SECTION("an exception: the one rank completes it alone") { io.abandon(); }
  CHECK_FALSE(io.pending());
  CHECK(CheckpointReader(path).global_step() == 2);
  CHECK(saved_w0(path) == 4.0f);
  CHECK(fs::exists(path + "/COMPLETE"));
  check_no_leftovers(dir);
}

TEST_CASE("an asynchronous checkpoint holds exactly the synchronous one's state, and resumes bitwise alike",
          "[checkpoint][async_checkpoint][multirank]") {
  struct Case {
    std::string strategy;
    int world;
  };
  const std::vector<Case> cases = {{"auto", 1}, {"ddp", 2}, {fsdp("full"), 2}, {fsdp("sharded"), 2}};
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.strategy << " world " << c.world) {
      const std::string dir = temp_dir("async-resume");
      const bool sharded = c.strategy.find("sharded") != std::string::npos;
      std::map<std::string, WorkerResult> part, resumed;
      for (const std::string mode : {"sync", "async"}) {
        auto kv = resume_kv(dir + "/" + mode, c.strategy, c.world);
        if (mode == "async") kv = async(kv);
        kv["trainer.max_steps"] = "5";  // mid-epoch: saves at steps 2 and 4, last.ckpt at 5
        part[mode] = run_ok(kv, dir);
      }
      CHECK(part["async"].losses == part["sync"].losses);
      for (const char* name : {"last.ckpt", "epoch=0-step=4.ckpt"}) {
        const std::string a = dir + "/async/checkpoints/" + name;
        CHECK(fs::is_directory(a) == sharded);
        check_same_checkpoint(dir + "/sync/checkpoints/" + name, a);
      }
      CHECK_FALSE(fs::exists(dir + "/async/checkpoints/epoch=0-step=2.ckpt"));  // top 1: removed once step 4 was whole
      for (const std::string mode : {"sync", "async"}) {
        auto kv = resume_kv(dir + "/" + mode, c.strategy, c.world);
        if (mode == "async") kv = async(kv);
        kv["ckpt_path"] = "last";
        resumed[mode] = run_ok(kv, dir);
      }
      CHECK(resumed["async"].global_step == 16);
      REQUIRE(resumed["async"].losses.size() == 11);
      CHECK(resumed["async"].losses == resumed["sync"].losses);
      CHECK(max_state_diff(resumed["async"].state, resumed["sync"].state) == 0.0);
      check_same_checkpoint(dir + "/sync/checkpoints/last.ckpt", dir + "/async/checkpoints/last.ckpt");
      check_no_leftovers(dir + "/async/checkpoints");
    }
  }
}

TEST_CASE(
    "an asynchronous write that fails or is killed keeps the previous checkpoint, and the error reaches every rank",
    "[checkpoint][async_checkpoint][fault][multirank]") {
  struct Case {
    std::string name, strategy, fault;
    int fault_rank;
  };
  const std::vector<Case> cases = {
      {"full, the writer's hook throws", fsdp("full"), "throw", 0},
      {"sharded, rank 1's hook throws", fsdp("sharded"), "throw", 1},
      {"full, disk full", fsdp("full"), "fsize", 0},
      {"sharded, disk full", fsdp("sharded"), "fsize", 1},
      {"ddp, the writer killed", "ddp", "kill", 0},
      {"sharded, rank 1 killed", fsdp("sharded"), "kill", 1},
  };
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.name) {
      const std::string dir = temp_dir("async-fault");
      auto base = [&](const std::string& root) {
        auto kv = async(resume_kv(root, c.strategy, 2));
        kv["hidden"] = "256";  // 1.7 MB of checkpoint, 0.85 MB per rank when sharded
        return kv;
      };
      const WorkerResult whole = run_ok(base(dir + "/whole"), dir);
      auto kv = base(dir + "/run");
      kv["trainer.max_steps"] = "8";
      if (c.fault == "fsize") {
        // The limit applies from the start: a first run writes the step-2 checkpoint without it.
        auto first = kv;
        first["trainer.max_steps"] = "2";
        run_ok(first, dir);
        kv["ckpt_path"] = "last";
        kv["fsize_limit"] = std::to_string(512 << 10);
      } else {
        kv["write_fault"] = c.fault;
        kv["write_fault_match"] = "step=4";
        kv["fault_rank"] = std::to_string(c.fault_rank);
      }
      const int code = run_worker(args_for(dir + "/o.pt", kv), dir, 120);
      const std::string log = read_text(dir + "/worker.0.log");
      INFO(log);
      CHECK(code != 0);
      // A rank whose launcher (rank 0) was killed ends itself moments later.
      for (int i = 0; i < 100 && !no_worker_left(dir); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      CHECK(no_worker_left(dir));
      if (c.fault == "throw") {
        CHECK_THAT(log, Contains("injected write fault") && Contains("epoch=0-step=4.ckpt"));
        if (c.fault_rank != 0) CHECK_THAT(log, Contains("failed on rank 1"));  // reached another rank
      }
      if (c.fault == "fsize") CHECK_THAT(log, Contains("epoch=0-step=4.ckpt") && Contains("File too large"));
      const std::string ckpts = dir + "/run/checkpoints";
      // The previous checkpoint is whole, and the one it was to replace was not removed.
      CHECK(CheckpointReader(ckpts + "/last.ckpt").global_step() == 2);
      CHECK(load_checkpoint_file(ckpts + "/last.ckpt").state_dict.size() > 0);
      CHECK(CheckpointReader(ckpts + "/epoch=0-step=2.ckpt").global_step() == 2);
      CHECK_FALSE(fs::exists(ckpts + "/epoch=0-step=4.ckpt"));
      if (c.fault != "kill") check_no_leftovers(ckpts);  // a killed run's are removed by the next run
      // Resuming from it continues exactly as the run that never failed.
      if (c.fault == "kill") {
        auto r = base(dir + "/run");
        r["ckpt_path"] = "last";
        const WorkerResult resumed = run_ok(r, dir);
        CHECK(resumed.global_step == 16);
        REQUIRE(resumed.losses.size() == 14);
        for (size_t i = 0; i < resumed.losses.size(); ++i) CHECK(resumed.losses[i] == whole.losses[2 + i]);
        CHECK(max_state_diff(resumed.state, whole.state) == 0.0);
        check_no_leftovers(ckpts);
      }
    }
  }
}
