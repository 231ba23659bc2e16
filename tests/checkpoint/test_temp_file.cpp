// What a killed writer leaves (its "<path>.tmp.<pid>" file, as large as the file it was writing)
// is removed by the next write of the same path, whichever writer makes it; files of live
// processes and of other paths are kept.
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "boring_model.h"
#include "checkpoint_support.h"
#include "volt/checkpoint/checkpoint.h"
#include "volt/checkpoint/safetensors.h"
#include "volt/checkpoint/state_io.h"
#include "volt/checkpoint/temp_file.h"
#include "volt/checkpoint/tensor_archive.h"
#include "volt/strategies/strategy.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;

namespace {

/// The pid of a process that has exited (and been reaped).
std::string dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int st = 0;
  ::waitpid(pid, &st, 0);
  return std::to_string(pid);
}

void touch(const std::string& path, size_t bytes = 16) { std::ofstream(path) << std::string(bytes, 'x'); }

/// Leftovers around `path`: two of dead writers (one with a writer number), one of this test's
/// parent (alive), and one of a dead writer of another file. Returns them in that order.
std::vector<std::string> plant(const std::string& path) {
  const std::string other = (fs::path(path).parent_path() / "other.ckpt").string();
  std::vector<std::string> files = {path + ".tmp." + dead_pid(), path + ".tmp." + dead_pid() + ".3",
                                    path + ".tmp." + std::to_string(::getppid()), other + ".tmp." + dead_pid()};
  for (const auto& f : files) touch(f, 4096);
  return files;
}

void check_cleaned(const std::vector<std::string>& planted) {
  CHECK_FALSE(fs::exists(planted[0]));
  CHECK_FALSE(fs::exists(planted[1]));
  CHECK(fs::exists(planted[2]));  // a live process may still be writing it
  CHECK(fs::exists(planted[3]));  // another file's
}

}  // namespace

TEST_CASE("stale_temp: only '<name>.tmp.<pid>[.<n>]' of a process that no longer runs", "[checkpoint][temp_file]") {
  const std::string dead = dead_pid();
  CHECK(volt::detail::stale_temp("a.ckpt.tmp." + dead));
  CHECK(volt::detail::stale_temp("a.ckpt.tmp." + dead + ".12"));
  CHECK_FALSE(volt::detail::stale_temp("a.ckpt.tmp." + std::to_string(::getpid())));
  CHECK_FALSE(volt::detail::stale_temp("a.ckpt.tmp." + std::to_string(::getpid()) + ".0"));
  CHECK_FALSE(volt::detail::stale_temp("a.ckpt"));
  CHECK_FALSE(volt::detail::stale_temp("a.ckpt.tmp."));
  CHECK_FALSE(volt::detail::stale_temp("a.ckpt.tmp.0"));
  CHECK_FALSE(volt::detail::stale_temp("a.ckpt.tmp.12x"));
  CHECK_FALSE(volt::detail::stale_temp("a.ckpt.tmp." + dead + ".x"));
  CHECK_FALSE(volt::detail::stale_temp("a.ckpt.tmp." + dead + "."));
  CHECK_FALSE(volt::detail::stale_temp("a.ckpt.tmp.99999999999999999999"));  // not a pid: no overflow
}

TEST_CASE("The next write of a path removes what killed writers of it left, and only that", "[checkpoint][temp_file]") {
  const std::string dir = temp_dir("temp-file");

  SECTION("atomic_write (manifests, markers, tensor dicts)") {
    const std::string path = dir + "/small.yaml";
    const auto planted = plant(path);
    volt::detail::atomic_write(path, "abc", 3);
    check_cleaned(planted);
    CHECK(fs::file_size(path) == 3);
  }
  SECTION("a checkpoint file (ArchiveWriter), the path not yet existing") {
    const std::string path = dir + "/epoch=0-step=1.ckpt";
    const auto planted = plant(path);
    SingleDeviceStrategy s(Precision("32-true", "cpu"), "cpu");
    BoringModel m;
    CheckpointHeader h;
    h.global_step = 1;
    save_state(s.state_layout(m, {}), h, path, CheckpointFormat::Full, s.state_comm());
    check_cleaned(planted);
    CHECK(fs::exists(path));
  }
  SECTION("a safetensors file") {
    const std::string path = dir + "/model.safetensors";
    const auto planted = plant(path);
    SafetensorsWriter w(path, {{"w", {at::kFloat, {2}}}});
    w.add("w", torch::ones({2}));
    w.commit();
    check_cleaned(planted);
    CHECK(fs::exists(path));
  }
  SECTION("this process's own earlier writer of the path is not touched") {
    const std::string path = dir + "/mine.ckpt";
    const std::string own = volt::detail::claim_temp_sibling(path);
    CHECK(own == path + ".tmp." + std::to_string(::getpid()));
    touch(own);
    CHECK(volt::detail::claim_temp_sibling(path, "1") == own + ".1");
    CHECK(fs::exists(own));
  }
  SECTION("a folder of that name is not a writer's file and stays") {
    const std::string path = dir + "/folder.ckpt";
    const std::string stale_dir = path + ".tmp." + dead_pid();
    fs::create_directories(stale_dir);
    volt::detail::atomic_write(path, "abc", 3);
    CHECK(fs::is_directory(stale_dir));
  }
}
