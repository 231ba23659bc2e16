// Exact resume, resharding, consolidation and damaged checkpoints, with real rank processes (the
// test worker, Gloo over loopback).
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "checkpoint/checkpoint_support.h"
#include "distributed/multi_rank.h"
#include "volt/checkpoint/checkpoint.h"
#include "volt/checkpoint/checkpoint_reader.h"
#include "volt/core/errors.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

/// 2 epochs of 8 global batches of 8 (64 samples), dropout (so the RNG state matters) and Adam
/// (so the optimizer state does).
std::map<std::string, std::string> resume_kv(const std::string& root, const std::string& strategy, int world) {
  auto kv = quiet_blocks_kv(root);
  kv["dropout"] = "0.1";
  kv["adam"] = "true";
  kv["lr"] = "0.01";
  kv["trainer.strategy"] = strategy;
  kv["trainer.devices"] = std::to_string(world);
  kv["batch_size"] = std::to_string(8 / world);
  return kv;
}

std::string fsdp(const std::string& sharding, const std::string& state_dict_type, const std::string& extra = "") {
  return "{name: fsdp, sharding_strategy: " + sharding + ", state_dict_type: " + state_dict_type +
         ", auto_wrap_policy: {module_types: [Block]}" + extra + "}";
}

WorkerResult run_ok(const std::map<std::string, std::string>& kv, const std::string& dir) {
  REQUIRE(run_worker(args_for(dir + "/o.pt", kv), dir) == 0);
  return read_worker_output(dir + "/o.pt");
}

void flip_byte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

}  // namespace

TEST_CASE(
    "a run stopped mid-epoch or killed and resumed is bitwise the uninterrupted run, for DDP and every FSDP "
    "sharding strategy",
    "[checkpoint][resume][multirank]") {
  struct Case {
    std::string strategy;
    int world;
    std::string stop;  // "max_steps": stops at step 5 (mid-epoch); "sigkill": rank 1 killed at step 5
  };
  const std::vector<Case> cases = {
      {"ddp", 2, "sigkill"},
      {fsdp("FULL_SHARD", "sharded"), 2, "sigkill"},
      {fsdp("FULL_SHARD", "full"), 2, "max_steps"},
      {fsdp("SHARD_GRAD_OP", "sharded"), 2, "max_steps"},
      {fsdp("NO_SHARD", "full"), 2, "max_steps"},
      {fsdp("HYBRID_SHARD", "sharded", ", device_mesh: [2, 2]"), 4, "max_steps"},
      {fsdp("_HYBRID_SHARD_ZERO2", "full", ", device_mesh: [2, 2]"), 4, "sigkill"},
      // Activation checkpointing replays dropout from saved RNG states: still bitwise after a resume.
      {fsdp("FULL_SHARD", "sharded", ", activation_checkpointing_policy: {module_types: [Block]}"), 2, "max_steps"},
  };
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.strategy << " world " << c.world << " stopped by " << c.stop) {
      const std::string dir = temp_dir("resume");
      const WorkerResult whole = run_ok(resume_kv(dir + "/whole", c.strategy, c.world), dir);
      REQUIRE(whole.global_step == 16);

      auto kv = resume_kv(dir + "/part", c.strategy, c.world);
      kv["trainer.enable_checkpointing"] = "true";
      kv["checkpoint_every_n_train_steps"] = c.stop == "sigkill" ? "2" : "3";
      int64_t resumed_at = 5;
      if (c.stop == "sigkill") {
        kv["fault_rank"] = "1";
        kv["fault_step"] = "5";
        kv["fault_kind"] = "kill";
        CHECK(run_worker(args_for(dir + "/o.pt", kv), dir) != 0);
        CHECK(no_worker_left(dir));
        resumed_at = 4;  // the last checkpoint before the kill
      } else {
        kv["trainer.max_steps"] = "5";
        const WorkerResult part = run_ok(kv, dir);
        REQUIRE(part.global_step == 5);
        REQUIRE(part.losses.size() == 5);
        for (size_t i = 0; i < 5; ++i) CHECK(part.losses[i] == whole.losses[i]);
      }
      const std::string last = dir + "/part/checkpoints/last.ckpt";
      REQUIRE(fs::exists(last));
      const bool sharded = c.strategy.find("sharded") != std::string::npos;
      CHECK(fs::is_directory(last) == sharded);
      {
        CheckpointReader r(last);
        CHECK(r.global_step() == resumed_at);
        CHECK(r.world_size() == c.world);
        CHECK(r.names(kRngSection).size() == static_cast<size_t>(c.world));  // every rank's CPU generator
      }

      kv.erase("fault_rank");
      kv.erase("fault_step");
      kv.erase("fault_kind");
      kv.erase("trainer.max_steps");
      kv["ckpt_path"] = "last";
      const WorkerResult resumed = run_ok(kv, dir);
      CHECK(resumed.global_step == 16);
      REQUIRE(resumed.losses.size() == 16 - static_cast<size_t>(resumed_at));
      for (size_t i = 0; i < resumed.losses.size(); ++i) {
        INFO("step " << resumed_at + static_cast<int64_t>(i));
        CHECK(resumed.losses[i] == whole.losses[static_cast<size_t>(resumed_at) + i]);
      }
      CHECK(max_state_diff(resumed.state, whole.state) == 0.0);
    }
  }
}

TEST_CASE("a sharded FSDP checkpoint reshards: other world sizes, wrap policies and DDP continue the same training",
          "[checkpoint][resume][reshard][multirank]") {
  // The same global batch (8) on every world size and no dropout (each rank draws its own masks), so
  // the continuation is the same computation up to reduction order.
  const std::string dir = temp_dir("reshard");
  auto no_dropout = [](std::map<std::string, std::string> kv) {
    kv["dropout"] = "0";
    return kv;
  };
  const WorkerResult whole = run_ok(no_dropout(resume_kv(dir + "/whole", fsdp("FULL_SHARD", "sharded"), 2)), dir);
  auto kv = no_dropout(resume_kv(dir + "/part", fsdp("FULL_SHARD", "sharded"), 2));
  kv["trainer.enable_checkpointing"] = "true";
  kv["checkpoint_every_n_train_steps"] = "5";
  kv["trainer.max_steps"] = "5";
  const WorkerResult part = run_ok(kv, dir);
  const std::string ckpt = dir + "/part/checkpoints/last.ckpt";
  REQUIRE(fs::is_directory(ckpt));

  struct Case {
    std::string name, strategy;
    int world;
  };
  const std::vector<Case> cases = {
      {"FSDP world 4", fsdp("FULL_SHARD", "full"), 4},
      {"FSDP world 1, no wrap policy", "{name: fsdp, sharding_strategy: FULL_SHARD}", 1},
      {"FSDP world 2, SHARD_GRAD_OP", fsdp("SHARD_GRAD_OP", "full"), 2},
      {"DDP world 2", "ddp", 2},
      {"single device", "auto", 1},
  };
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.name) {
      const std::string run = temp_dir("reshard-run");
      auto r = no_dropout(resume_kv(run, c.strategy, c.world));
      r["ckpt_path"] = ckpt;
      // First: the restored state is exactly the saved one (no step taken).
      r["trainer.max_steps"] = "5";
      const WorkerResult restored = run_ok(r, run);
      CHECK(restored.global_step == 5);
      CHECK(restored.losses.empty());
      CHECK(max_state_diff(restored.state, part.state) == 0.0);
      // Then: training continues as the uninterrupted run did (optimizer state resharded too).
      r.erase("trainer.max_steps");
      const WorkerResult resumed = run_ok(r, run);
      REQUIRE(resumed.losses.size() == 11);
      for (size_t i = 0; i < resumed.losses.size(); ++i)
        CHECK(resumed.losses[i] == Approx(whole.losses[5 + i]).epsilon(1e-5));
      CHECK(max_state_diff(resumed.state, whole.state) < 1e-4);
    }
  }
}

TEST_CASE("volt consolidate turns a sharded checkpoint into the full one, and damaged ones are refused naming the file",
          "[checkpoint][consolidate][multirank]") {
  const std::string dir = temp_dir("consolidate");
  auto kv = resume_kv(dir + "/run", fsdp("FULL_SHARD", "sharded"), 2);
  kv["trainer.enable_checkpointing"] = "true";
  kv["checkpoint_every_n_train_steps"] = "3";
  kv["trainer.max_steps"] = "3";
  const WorkerResult part = run_ok(kv, dir);
  const std::string ckpt = dir + "/run/checkpoints/last.ckpt";
  REQUIRE(fs::is_directory(ckpt));
  CHECK(fs::exists(ckpt + "/manifest.yaml"));
  CHECK(fs::exists(ckpt + "/COMPLETE"));
  CHECK(fs::exists(ckpt + "/rank_00000.ckpt"));
  CHECK(fs::exists(ckpt + "/rank_00001.ckpt"));
  CHECK_FALSE(fs::exists(ckpt + ".partial"));

  // Each parameter is split between the two rank files (the manifest's pieces).
  CheckpointReader sharded(ckpt);
  CHECK(sharded.format() == "sharded");
  bool split = false;
  for (const auto& n : sharded.names(kModelSection))
    split = split || sharded.tensor(kModelSection, n).pieces.size() == 2;
  CHECK(split);

  const std::string out = dir + "/full.ckpt";
  {
    const std::vector<std::string> argv{VOLT_CLI, "consolidate", ckpt, "-o", out};
    REQUIRE(run_processes({argv}, {{}}, 120, dir + "/cli")[0] == 0);
  }
  const Checkpoint full = load_checkpoint_file(out);
  const Checkpoint assembled = load_checkpoint_file(ckpt);
  CHECK(full.global_step == 3);
  CHECK(CheckpointReader(out).format() == "full");
  REQUIRE(full.state_dict.size() == part.state.size() + 0);
  CHECK(max_state_diff(full.state_dict, part.state) == 0.0);
  REQUIRE(full.optimizer_state.size() == assembled.optimizer_state.size());
  for (const auto& [k, v] : assembled.optimizer_state) CHECK(torch::equal(full.optimizer_state.at(k), v));
  CHECK(full.optimizer_state.count("block0.linear.weight.exp_avg_sq"));
  CHECK(full.rng_states.size() == 2);
  {  // default output name, as Lightning's consolidate_checkpoint
    const std::vector<std::string> argv{VOLT_CLI, "consolidate", ckpt + "/"};
    REQUIRE(run_processes({argv}, {{}}, 120, dir + "/cli2")[0] == 0);
    CHECK(fs::exists(ckpt + ".consolidated"));
  }
  {  // a path that is not a checkpoint
    const std::vector<std::string> argv{VOLT_CLI, "consolidate", dir + "/nothing"};
    CHECK(run_processes({argv}, {{}}, 120, dir + "/cli3")[0] != 0);
    CHECK_THAT(read_text(dir + "/cli3.0.log"), Contains(dir + "/nothing"));
  }

  // Damage, one copy at a time.
  auto copy = [&](const std::string& tag) {
    const std::string c = dir + "/" + tag + ".ckpt";
    REQUIRE(std::system(("cp -r '" + ckpt + "' '" + c + "'").c_str()) == 0);
    return c;
  };
  SECTION("a missing shard file") {
    const std::string c = copy("missing");
    fs::remove(c + "/rank_00001.ckpt");
    const std::string msg = checkpoint_error([&] { CheckpointReader r(c); });
    CHECK_THAT(msg, Contains("rank_00001.ckpt") && Contains("rank 1"));
  }
  SECTION("the rank files swapped") {
    const std::string c = copy("swapped");
    fs::rename(c + "/rank_00000.ckpt", c + "/t");
    fs::rename(c + "/rank_00001.ckpt", c + "/rank_00000.ckpt");
    fs::rename(c + "/t", c + "/rank_00001.ckpt");
    const std::string msg = checkpoint_error([&] { CheckpointReader r(c); });
    CHECK_THAT(msg, Contains("holds rank 1's shard") && Contains("swapped"));
    CHECK_THAT(msg, !Contains("another save"));
  }
  SECTION("no COMPLETE marker (a save that did not finish)") {
    const std::string c = copy("incomplete");
    fs::remove(c + "/COMPLETE");
    CHECK_THAT(checkpoint_error([&] { CheckpointReader r(c); }), Contains("incomplete") && Contains(c));
  }
  SECTION("an edited manifest") {
    const std::string c = copy("edited");
    std::ofstream(c + "/manifest.yaml", std::ios::app) << "# edited\n";
    CHECK_THAT(checkpoint_error([&] { CheckpointReader r(c); }), Contains("manifest.yaml"));
  }
  SECTION("one rank's file passed instead of the folder") {
    CHECK_THAT(checkpoint_error([&] { CheckpointReader r(ckpt + "/rank_00000.ckpt"); }), Contains("folder"));
  }
  SECTION("a corrupted byte in rank 1's file fails the resume on every rank, naming the file") {
    const std::string c = copy("corrupt");
    const auto* t = ArchiveReader(c + "/rank_00001.ckpt").find(kModelSection, "block0.linear.weight");
    REQUIRE(t != nullptr);
    flip_byte(c + "/rank_00001.ckpt", t->offset + 8);
    const std::string run = temp_dir("corrupt-run");
    auto r = resume_kv(run, fsdp("FULL_SHARD", "full"), 2);
    r["ckpt_path"] = c;
    const int code = run_worker(args_for(run + "/o.pt", r), run, 120);
    const std::string log = read_text(run + "/worker.0.log");
    INFO(log);
    CHECK(code != 0);
    CHECK_THAT(log, Contains("checksum") && Contains("rank_00001.ckpt") && Contains("failed on rank 1"));
    CHECK(no_worker_left(run));
  }
}

TEST_CASE("a checkpoint write that fails (disk full) fails every rank and leaves the previous checkpoint intact",
          "[checkpoint][fault][multirank]") {
  for (std::string type : {"full", "sharded"}) {
    DYNAMIC_SECTION(type) {
      const std::string dir = temp_dir("disk-full");
      auto kv = resume_kv(dir + "/run", fsdp("FULL_SHARD", type), 2);
      kv["hidden"] = "256";  // 1.7 MB of checkpoint, 0.85 MB per rank when sharded: over the limit below
      kv["trainer.enable_checkpointing"] = "true";
      kv["checkpoint_every_n_train_steps"] = "2";
      kv["trainer.max_steps"] = "2";
      run_ok(kv, dir);
      const std::string last = dir + "/run/checkpoints/last.ckpt";
      REQUIRE(CheckpointReader(last).global_step() == 2);

      kv["ckpt_path"] = "last";
      kv["trainer.max_steps"] = "4";
      kv["fsize_limit"] = std::to_string(512 << 10);
      const int code = run_worker(args_for(dir + "/o.pt", kv), dir, 120);
      const std::string log = read_text(dir + "/worker.0.log");
      INFO(log);
      CHECK(code != 0);
      CHECK_THAT(log, Contains("last.ckpt") || Contains("epoch=0-step=4"));
      CHECK(no_worker_left(dir));
      // The previous checkpoint is whole, and no temporary file or folder is left behind.
      CHECK(CheckpointReader(last).global_step() == 2);
      CHECK(load_checkpoint_file(last).state_dict.size() > 0);
      for (const auto& e : fs::directory_iterator(dir + "/run/checkpoints")) {  // not recursive: see core/files.h
        const std::string name = e.path().filename().string();
        CHECK(name.find(".tmp.") == std::string::npos);
        CHECK(name.find(".partial") == std::string::npos);
      }
    }
  }
}
