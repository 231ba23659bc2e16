// ModelCheckpoint names: a fixed filename under save_top_k > 1 gets Lightning's "-v1" versions
// instead of overwriting a kept checkpoint; several ModelCheckpoints of one run share a folder.
#include <torch/torch.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>

#include "boring_model.h"
#include "trainer/trainer_support.h"
#include "volt/callbacks/model_checkpoint.h"
#include "volt/checkpoint/checkpoint_reader.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;

TEST_CASE("save_top_k 2 with a fixed filename keeps the 2 best checkpoints as fixed.ckpt and fixed-v1.ckpt",
          "[callbacks][checkpoint]") {
  const std::string root = temp_dir("ckpt-fixed-name");
  auto o = quiet_options(root);
  o.enable_checkpointing = true;
  ModelCheckpointOptions mo;
  mo.dirpath = root + "/ckpt";
  mo.filename = "fixed";
  mo.monitor = "train_loss";
  mo.save_top_k = 2;
  mo.every_n_train_steps = 1;
  auto mc = std::make_shared<ModelCheckpoint>(mo);
  Trainer t(o, {mc});
  auto m = make_model(3);
  auto train = make_loader(48, 8);
  t.fit(*m, train);
  REQUIRE(m->losses.size() == 6);

  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(mo.dirpath)) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  CHECK(files == std::vector<std::string>{"fixed-v1.ckpt", "fixed.ckpt"});
  // They hold the two steps of lowest loss (step s's loss is checkpointed at global step s + 1).
  std::vector<int64_t> order = {0, 1, 2, 3, 4, 5};
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return m->losses[a] < m->losses[b]; });
  std::vector<int64_t> kept;
  for (const auto& f : files) kept.push_back(CheckpointReader(mo.dirpath + "/" + f).global_step());
  std::sort(kept.begin(), kept.end());
  std::vector<int64_t> best = {order[0] + 1, order[1] + 1};
  std::sort(best.begin(), best.end());
  CHECK(kept == best);
  CHECK(CheckpointReader(mc->best_model_path()).global_step() == order[0] + 1);
}

TEST_CASE("two ModelCheckpoints of one run write into one folder", "[callbacks][checkpoint]") {
  const std::string root = temp_dir("ckpt-two-callbacks");
  auto o = quiet_options(root);
  o.enable_checkpointing = true;
  ModelCheckpointOptions a, b;
  a.filename = "a-{step}";
  a.every_n_train_steps = 2;
  a.save_top_k = -1;
  b.filename = "b-{step}";
  b.every_n_train_steps = 3;
  b.save_top_k = -1;
  Trainer t(o, {std::make_shared<ModelCheckpoint>(a), std::make_shared<ModelCheckpoint>(b)});
  auto m = make_model(0);
  auto train = make_loader(48, 8);
  t.fit(*m, train);
  const std::string dir = root + "/checkpoints";
  for (const char* f : {"a-step=2.ckpt", "a-step=4.ckpt", "a-step=6.ckpt", "b-step=3.ckpt", "b-step=6.ckpt"}) {
    INFO(f);
    CHECK(fs::exists(dir + "/" + f));
  }
  // The run is over: the folder is free for the next one.
  Trainer again(o, {std::make_shared<ModelCheckpoint>(a)});
  auto m2 = make_model(0);
  auto train2 = make_loader(16, 8);
  again.fit(*m2, train2);
}
