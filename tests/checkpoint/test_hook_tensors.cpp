// Tensors that on_save_checkpoint adds (CheckpointMeta::tensors) come back bit for bit in
// on_load_checkpoint: in one process, and with 2 real rank processes under DDP and FSDP, full and
// sharded; a rank whose tensors differ fails the save on every rank; consolidation keeps them.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "checkpoint/hook_tensors.h"
#include "distributed/multi_rank.h"
#include "trainer/trainer_support.h"
#include "volt/checkpoint/checkpoint.h"
#include "volt/checkpoint/checkpoint_reader.h"
#include "volt/core/errors.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

/// The BoringModel keeping hook_tensors("model.", ...) in its checkpoints.
class TensorModel : public BoringModel {
 public:
  void on_save_checkpoint(CheckpointMeta& c) override { save_module_tensors(*this, c); }
  void on_load_checkpoint(const CheckpointMeta& c) override { loaded = load_module_tensors(*this, c); }
  int64_t loaded = -1;
};

/// Every "rank<r>.<name>" of the section, checked against hook_tensors of each rank at `step`;
/// returns how many.
int64_t check_saved(const CheckpointReader& r, int64_t world, int64_t step) {
  int64_t n = 0;
  for (int64_t rank = 0; rank < world; ++rank)
    for (const char* prefix : {"model.", "keeper."}) {
      std::map<std::string, torch::Tensor> got;
      for (const auto& [name, t] : hook_tensors(prefix, rank, step)) {
        const std::string key = "rank" + std::to_string(rank) + "." + name;
        REQUIRE(r.has(kExtraTensorSection, key));
        got[name] = r.read(kExtraTensorSection, key);
      }
      n += check_hook_tensors(got, prefix, rank, step);
    }
  CHECK(r.names(kExtraTensorSection).size() == static_cast<size_t>(n));
  return n;
}

std::string read_mark(const std::string& dir, int rank) {
  std::ifstream in(dir + "/loaded_rank" + std::to_string(rank) + ".txt");
  std::string received, loaded;
  in >> received >> loaded;
  return received + " " + loaded;
}

}  // namespace

TEST_CASE("hook tensors: float, bf16 and int64 beyond 2^53 come back exactly in one process",
          "[checkpoint][hook_tensors]") {
  const std::string dir = temp_dir("hook-tensors");
  auto model = make_model<TensorModel>(3);
  auto keeper = std::make_shared<TensorKeeper>();
  DataLoader loader = make_loader(32, 8);
  TrainerOptions o = quiet_options(dir);
  o.max_steps = 3;
  {
    Trainer trainer(o, {keeper});
    trainer.fit(*model, loader);
    trainer.save_checkpoint(dir + "/a.ckpt");
    trainer.save_checkpoint(dir + "/w.ckpt", /*weights_only=*/true);
  }
  CHECK(check_saved(CheckpointReader(dir + "/a.ckpt"), 1, 3) == 6);
  // weights_only keeps them, as it keeps on_save_checkpoint's `extra`.
  CHECK(check_saved(CheckpointReader(dir + "/w.ckpt"), 1, 3) == 6);
  {
    Checkpoint whole = load_checkpoint_file(dir + "/a.ckpt");
    REQUIRE(whole.extra_tensors.size() == 6);
    save_checkpoint_file(whole, dir + "/copy.ckpt");  // the in-memory round trip keeps them too
    CHECK(check_saved(CheckpointReader(dir + "/copy.ckpt"), 1, 3) == 6);
  }

  auto resumed = make_model<TensorModel>(4);
  auto keeper2 = std::make_shared<TensorKeeper>();
  o.max_steps = 4;
  Trainer trainer(o, {keeper2});
  trainer.fit(*resumed, loader, nullptr, dir + "/a.ckpt");
  CHECK(resumed->loaded == 3);
  CHECK(keeper2->received == 6);  // this rank's, the module's and the callback's, nothing else
  CHECK(keeper2->loaded == 3);
}

TEST_CASE("hook tensors: a checkpoint without them gives on_load_checkpoint none", "[checkpoint][hook_tensors]") {
  const std::string dir = temp_dir("hook-tensors-none");
  auto model = make_model<BoringModel>(3);
  DataLoader loader = make_loader(16, 8);
  TrainerOptions o = quiet_options(dir);
  {
    Trainer trainer(o);
    trainer.fit(*model, loader);
    trainer.save_checkpoint(dir + "/a.ckpt");
  }
  CHECK(CheckpointReader(dir + "/a.ckpt").names(kExtraTensorSection).empty());
  auto resumed = make_model<TensorModel>(4);
  o.max_epochs = 2;
  Trainer trainer(o);
  trainer.fit(*resumed, loader, nullptr, dir + "/a.ckpt");
  CHECK(resumed->loaded == 0);
}

TEST_CASE(
    "hook tensors: each rank gets its own back under DDP and FSDP, full and sharded, and consolidation keeps them",
    "[checkpoint][hook_tensors][multirank]") {
  const std::string fsdp = "{name: fsdp, auto_wrap_policy: {module_types: [Block]}, state_dict_type: ";
  for (const std::string strategy : {std::string("ddp"), fsdp + "full}", fsdp + "sharded}"}) {
    DYNAMIC_SECTION(strategy) {
      const std::string dir = temp_dir("hook-tensors-mr");
      const std::string marks = dir + "/marks";
      fs::create_directories(marks);
      auto kv = quiet_worker_kv(dir + "/run");
      kv["trainer.strategy"] = strategy;
      kv["trainer.devices"] = "2";
      kv["batch_size"] = "4";
      kv["trainer.max_steps"] = "4";
      kv["trainer.enable_checkpointing"] = "true";
      kv["checkpoint_every_n_train_steps"] = "2";
      kv["hook_tensors"] = marks;
      REQUIRE(run_worker(args_for(dir + "/o.pt", kv), dir) == 0);
      const std::string last = dir + "/run/checkpoints/last.ckpt";
      REQUIRE(fs::exists(last));
      CHECK(fs::is_directory(last) == (strategy.find("sharded") != std::string::npos));
      CHECK(check_saved(CheckpointReader(last), 2, 4) == 12);
      const std::string full = dir + "/consolidated.ckpt";
      consolidate_checkpoint(last, full);
      CHECK(check_saved(CheckpointReader(full), 2, 4) == 12);

      kv["trainer.max_steps"] = "6";
      kv["ckpt_path"] = "last";
      REQUIRE(run_worker(args_for(dir + "/o.pt", kv), dir) == 0);
      CHECK(read_mark(marks, 0) == "6 3");  // the module's 3 (checked by it) and the callback's 3
      CHECK(read_mark(marks, 1) == "6 3");

      // One rank: the checkpoint of 2 ranks gives none back, with a warning naming it.
      fs::remove_all(marks);
      fs::create_directories(marks);
      auto one = kv;
      one["trainer.devices"] = "1";
      one["trainer.strategy"] = "auto";
      one["batch_size"] = "8";
      one["ckpt_path"] = full;
      REQUIRE(run_worker(args_for(dir + "/o.pt", one), dir) == 0);
      CHECK(read_mark(marks, 0) == "0 0");
      CHECK_THAT(read_text(dir + "/worker.0.log"), Contains(full) && Contains("written by 2 rank(s)"));
    }
  }
}

TEST_CASE("hook tensors: a rank whose tensors differ fails the save on every rank, naming the tensor and the rank",
          "[checkpoint][hook_tensors][multirank]") {
  const std::string fsdp = "{name: fsdp, auto_wrap_policy: {module_types: [Block]}, state_dict_type: sharded}";
  for (const std::string strategy : {std::string("ddp"), fsdp}) {
    DYNAMIC_SECTION(strategy) {
      const std::string dir = temp_dir("hook-tensors-mismatch");
      auto kv = quiet_worker_kv(dir + "/run");
      kv["trainer.strategy"] = strategy;
      kv["trainer.devices"] = "2";
      kv["batch_size"] = "4";
      kv["trainer.max_steps"] = "4";
      kv["trainer.enable_checkpointing"] = "true";
      kv["checkpoint_every_n_train_steps"] = "2";
      kv["hook_tensors"] = dir;
      kv["hook_tensors_mismatch_rank"] = "1";
      CHECK(run_worker(args_for(dir + "/o.pt", kv), dir) != 0);
      CHECK(no_worker_left(dir));
      const std::string log = read_text(dir + "/worker.0.log");
      CHECK_THAT(log, Contains("'keeper.float' is Float [3] on rank 1 but Float [2, 3] on rank 0"));
      CHECK_THAT(log, Contains("failed on rank 1"));  // what rank 0 reports
      CHECK_FALSE(fs::exists(dir + "/run/checkpoints/last.ckpt"));
    }
  }
}
