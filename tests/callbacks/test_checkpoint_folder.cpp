// The checkpoint folder of a run: two runs never write into one folder at once, what an
// interrupted save left is cleaned up by the next run, and ckpt_path=last says when only an
// interrupted save exists.
#include <torch/torch.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "boring_model.h"
#include "volt/callbacks/checkpoint_folder.h"
#include "volt/callbacks/model_checkpoint.h"
#include "volt/checkpoint/temp_file.h"
#include "volt/core/errors.h"
#include "volt/core/files.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

TrainerOptions checkpointing(const std::string& root) {
  TrainerOptions o = quiet_options(root);
  o.enable_checkpointing = true;
  o.max_steps = 2;
  return o;
}

}  // namespace

TEST_CASE("A second run writing into the same checkpoint folder fails at once, naming the first",
          "[callbacks][model_checkpoint]") {
  const std::string root = temp_dir("ckpt-lock");
  fs::create_directories(root + "/checkpoints");
  auto data = std::make_shared<RandomDataset>(32);
  DataLoader loader(data, {8, false});
  {
    volt::detail::FileLock other;  // another run holding the folder
    REQUIRE(other.try_lock(root + "/checkpoints").empty());
    Trainer t(checkpointing(root));
    BoringModel m;
    try {
      t.fit(m, loader);
      FAIL("fit ran");
    } catch (const ConfigError& e) {  // exit code 2: no restart agent retries it
      CHECK_THAT(e.what(), Contains("another run") && Contains(root + "/checkpoints"));
    }
    CHECK_FALSE(fs::exists(root + "/checkpoints/last.ckpt"));
  }
  Trainer t(checkpointing(root));  // the other run is gone: this one runs
  BoringModel m;
  t.fit(m, loader);
  CHECK(fs::exists(root + "/checkpoints/last.ckpt"));
  Trainer again(checkpointing(root));  // and released the folder when it ended
  BoringModel m2;
  CHECK_NOTHROW(again.fit(m2, loader));
}

TEST_CASE("An interrupted save's leftovers are removed by the next run, and ckpt_path last with only those says so",
          "[callbacks][model_checkpoint]") {
  const std::string root = temp_dir("ckpt-leftovers");
  const std::string d = root + "/checkpoints";
  fs::create_directories(d + "/last.ckpt.partial");
  std::ofstream(d + "/last.ckpt.partial/rank_00000.ckpt") << "half";
  const std::string stale = d + "/epoch=0-step=1.ckpt.tmp." + std::to_string(dead_pid());
  const std::string stale_tagged = volt::detail::temp_sibling_name(d + "/epoch=0-step=2.ckpt", dead_pid());
  const std::string live = d + "/epoch=0-step=1.ckpt.tmp." + std::to_string(::getpid());
  std::ofstream(stale) << "half";
  std::ofstream(stale_tagged) << "half";
  std::ofstream(live) << "being written";
  auto data = std::make_shared<RandomDataset>(32);
  DataLoader loader(data, {8, false});
  {
    Trainer t(quiet_options(root));
    BoringModel m;
    try {
      t.validate(m, loader, "last");
      FAIL("validated");
    } catch (const CheckpointError& e) {
      CHECK_THAT(e.what(), Contains("last.ckpt.partial") && Contains("interrupted"));
    }
  }
  Trainer t(checkpointing(root));
  BoringModel m;
  t.fit(m, loader);
  CHECK_FALSE(fs::exists(d + "/last.ckpt.partial"));
  CHECK_FALSE(fs::exists(stale));
  CHECK_FALSE(fs::exists(stale_tagged));
  CHECK(fs::exists(live));  // a live process's file is not touched
  CHECK(fs::exists(d + "/last.ckpt"));
}

TEST_CASE("ckpt_path=last: a newest last-v<N>.ckpt whose link target is gone is an error, not an older last.ckpt",
          "[callbacks][checkpoint_folder]") {
  const std::string dir = temp_dir("ckpt-last-dangling");
  std::ofstream(dir + "/last.ckpt") << "x";
  std::ofstream(dir + "/epoch=1-step=4.ckpt") << "y";
  fs::last_write_time(dir + "/last.ckpt", fs::file_time_type::clock::now() - std::chrono::hours(1));
  fs::create_symlink("epoch=1-step=4.ckpt", dir + "/last-v1.ckpt");
  CHECK(volt::detail::newest_last_checkpoint(dir) == fs::canonical(dir + "/epoch=1-step=4.ckpt").string());
  fs::remove(dir + "/epoch=1-step=4.ckpt");  // the link, made after last.ckpt, now dangles
  CHECK_THROWS_WITH(volt::detail::newest_last_checkpoint(dir),
                    Contains("last-v1.ckpt") && Contains("epoch=1-step=4.ckpt") && Contains("no longer exists"));
  // A dangling link older than a whole last checkpoint is not the run's latest: that one is.
  fs::remove(dir + "/last-v1.ckpt");
  fs::create_symlink("gone.ckpt", dir + "/last-v2.ckpt");
  std::ofstream(dir + "/last-v3.ckpt") << "z";
  fs::last_write_time(dir + "/last-v3.ckpt", fs::file_time_type::clock::now() + std::chrono::hours(1));
  CHECK(volt::detail::newest_last_checkpoint(dir) == dir + "/last-v3.ckpt");
}
