// ModelCheckpoint keeps the checkpoint a fit resumed from (Lightning's _should_remove_checkpoint),
// while top-k still replaces the checkpoints the resumed run wrote itself.
#include <catch2/catch.hpp>
#include <filesystem>
#include <set>

#include "trainer/trainer_support.h"

using namespace volt;
using namespace volt::testing;

TEST_CASE("a resumed fit keeps the checkpoint it resumed from", "[model_checkpoint][resume]") {
  namespace fs = std::filesystem;
  const std::string root = temp_dir("mc-resumed-kept");
  auto opts = quiet_options(root);
  opts.enable_checkpointing = true;
  opts.limit_train_batches = BatchLimit::count(2);
  auto dl = make_loader();
  auto run = [&](int64_t epochs, const std::string& ckpt) {
    ModelCheckpointOptions mo;  // save_top_k 1 without a monitor: the latest only
    opts.max_epochs = epochs;
    auto mc = std::make_shared<ModelCheckpoint>(mo);
    Trainer t(opts, {mc});
    auto m = make_model(0);
    t.fit(*m, dl, nullptr, ckpt);
    return mc->best_model_path();
  };
  const std::string first = run(2, "");
  REQUIRE(fs::exists(first));
  CHECK(fs::path(first).filename() == "epoch=1-step=4.ckpt");
  const std::string second = run(4, first);
  CHECK(fs::path(second).filename() == "epoch=3-step=8.ckpt");
  CHECK(fs::exists(second));
  CHECK(fs::exists(first));                                            // the starting point survives
  CHECK_FALSE(fs::exists(root + "/checkpoints/epoch=2-step=6.ckpt"));  // the resumed run's own was replaced
}

TEST_CASE("a fit resumed into another folder leaves the first run's checkpoints alone", "[model_checkpoint][resume]") {
  namespace fs = std::filesystem;
  const std::string a = temp_dir("mc-resume-elsewhere-a"), b = temp_dir("mc-resume-elsewhere-b");
  auto dl = make_loader();
  auto run = [&](const std::string& root, int64_t steps, const std::string& ckpt, ModelCheckpointOptions mo) {
    auto opts = quiet_options(root);
    opts.enable_checkpointing = true;
    opts.max_epochs = -1;
    opts.max_steps = steps;
    mo.every_n_train_steps = 2;
    mo.save_last = true;
    auto mc = std::make_shared<ModelCheckpoint>(mo);
    Trainer t(opts, {mc});
    auto m = make_model(0);
    t.fit(*m, dl, nullptr, ckpt);
  };
  auto files = [](const std::string& root) {
    std::set<std::string> out;
    for (const auto& e : fs::directory_iterator(root + "/checkpoints")) out.insert(e.path().filename().string());
    return out;
  };
  for (const bool monitored : {false, true}) {
    INFO("monitor " << monitored);
    ModelCheckpointOptions mo;  // the latest only; or the best 2 by train_loss
    if (monitored) {
      mo.monitor = "train_loss";
      mo.save_top_k = 2;
    }
    const std::string ra = a + (monitored ? "/m" : "/n"), rb = b + (monitored ? "/m" : "/n");
    run(ra, 4, "", mo);
    const auto before = files(ra);
    REQUIRE(before.count("last.ckpt") == 1);
    // B starts from A's last.ckpt, whose state names A's top k: B must not prune them.
    run(rb, 10, ra + "/checkpoints/last.ckpt", mo);
    CHECK(files(ra) == before);
    // B's own top k still prunes B's files (saved at steps 6, 8 and 10): 1 kept, or the best 2.
    auto kept = files(rb);
    kept.erase("last.ckpt");
    CHECK(static_cast<int64_t>(kept.size()) == (monitored ? 2 : 1));
  }
}
