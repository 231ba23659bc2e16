// Every byte that affects a resume is verified: an edited epoch or step in a file's index is
// refused, and a sharded folder never assembles rank files of two different saves.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "boring_model.h"
#include "checkpoint_support.h"
#include "volt/checkpoint/checkpoint.h"
#include "volt/checkpoint/checkpoint_reader.h"
#include "volt/checkpoint/state_io.h"
#include "volt/strategies/strategy.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

/// Replaces the first `from` in the file's bytes by `to` (same length).
void patch_bytes(const std::string& path, const std::string& from, const std::string& to) {
  REQUIRE(from.size() == to.size());
  auto bytes = read_bytes(path);
  std::string text(bytes.begin(), bytes.end());
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  text.replace(at, to.size(), to);
  write_bytes(path, text.data(), text.size());
}

void save_sharded(const std::string& dir, int64_t step) {
  SingleDeviceStrategy s(Precision("32-true", "cpu"), "cpu");
  BoringModel m;
  CheckpointHeader h;
  h.global_step = step;
  save_state(s.state_layout(m, {}), h, dir, CheckpointFormat::Sharded, s.state_comm());
}

}  // namespace

TEST_CASE("An edited step in a checkpoint's index is refused", "[checkpoint]") {
  const std::string path = temp_dir("ckpt-edit") + "/a.ckpt";
  Checkpoint c;
  c.global_step = 120;
  c.state_dict["w"] = torch::ones({4});
  save_checkpoint_file(c, path);
  REQUIRE(load_checkpoint_file(path).global_step == 120);
  patch_bytes(path, "global_step: 120", "global_step: 990");
  const std::string msg = checkpoint_error([&] { load_checkpoint_file(path); });
  CHECK_THAT(msg, Contains(path) && Contains("checksum"));
}

TEST_CASE("A sharded folder whose rank file comes from another save is refused, by the reader and consolidate",
          "[checkpoint][sharded]") {
  const std::string dir = temp_dir("ckpt-mix");
  save_sharded(dir + "/a", 10);
  save_sharded(dir + "/b", 20);
  REQUIRE(CheckpointReader(dir + "/b").global_step() == 20);
  fs::copy_file(dir + "/a/rank_00000.ckpt", dir + "/b/rank_00000.ckpt", fs::copy_options::overwrite_existing);
  const std::string msg = checkpoint_error([&] { CheckpointReader r(dir + "/b"); });
  CHECK_THAT(msg, Contains("rank 0") && Contains("another save") && Contains(dir + "/b"));
  CHECK_THROWS_AS(consolidate_checkpoint(dir + "/b", dir + "/b.full"), CheckpointError);
  CHECK_FALSE(fs::exists(dir + "/b.full"));
}
