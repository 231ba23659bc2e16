// ModelCheckpoint keeps the checkpoint a fit resumed from (Lightning's _should_remove_checkpoint),
// while top-k still replaces the checkpoints the resumed run wrote itself.
#include <catch2/catch.hpp>
#include <filesystem>

#include "trainer/trainer_support.h"

using namespace volt;
using namespace volt::testing;

TEST_CASE("a resumed fit keeps the checkpoint it resumed from", "[model_checkpoint][resume]") {
  namespace fs = std::filesystem;
  const std::string root = temp_dir("mc-resumed-kept");
  auto opts = quiet_options(root);
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
