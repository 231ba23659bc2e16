// What a killed writer leaves (its temporary sibling, as large as the file it was writing) is
// removed by the next large write of the same path; files of live processes, of other hosts, of
// other paths and of users are kept.
#include <torch/torch.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "boring_model.h"
#include "volt/checkpoint/checkpoint.h"
#include "volt/checkpoint/safetensors.h"
#include "volt/checkpoint/state_io.h"
#include "volt/checkpoint/temp_file.h"
#include "volt/checkpoint/tensor_archive.h"
#include "volt/strategies/strategy.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;
using volt::detail::claim_temp_sibling;
using volt::detail::host_tag;
using volt::detail::stale_temp;
using volt::detail::temp_sibling_name;

namespace {

void touch(const std::string& path, size_t bytes = 16) { std::ofstream(path) << std::string(bytes, 'x'); }

/// Another host's tag (any other 8 hex digits).
std::string other_tag() { return host_tag() == "00000000" ? "00000001" : "00000000"; }

struct Planted {
  std::vector<std::string> removed;  // a dead writer's of this host, with and without a writer number
  std::vector<std::string> kept;
};

/// Leftovers around `path`, and what the next write of it must do with each.
Planted plant(const std::string& path) {
  const std::string dir = fs::path(path).parent_path().string();
  Planted p;
  p.removed = {temp_sibling_name(path, dead_pid()), temp_sibling_name(path, dead_pid(), "3")};
  p.kept = {
      temp_sibling_name(path, ::getppid()),                              // a live process may still write it
      path + ".tmp.h" + other_tag() + "." + std::to_string(dead_pid()),  // another host's: it may be alive
      path + ".tmp." + std::to_string(dead_pid()),                       // untagged: maybe a user's file
      temp_sibling_name(path + "2", dead_pid()),                         // another path's
      temp_sibling_name(dir + "/other.ckpt", dead_pid()),
  };
  for (const auto& f : p.removed) touch(f, 4096);
  for (const auto& f : p.kept) touch(f, 4096);
  return p;
}

void check_cleaned(const Planted& p) {
  for (const auto& f : p.removed) CHECK_FALSE(fs::exists(f));
  for (const auto& f : p.kept) {
    INFO(f);
    CHECK(fs::exists(f));
  }
}

}  // namespace

TEST_CASE("Temporary names: tagged by host, judged stale only for this host's dead processes",
          "[checkpoint][temp_file]") {
  const std::string tag = host_tag();
  CHECK(tag.size() == 8);
  CHECK(tag.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(host_tag() == tag);  // stable
  const long dead = dead_pid();
  CHECK(temp_sibling_name("/a/b.ckpt", 42) == "/a/b.ckpt.tmp.h" + tag + ".42");
  CHECK(temp_sibling_name("/a/b.ckpt", 42, "7") == "/a/b.ckpt.tmp.h" + tag + ".42.7");
  CHECK(stale_temp(temp_sibling_name("a.ckpt", dead)));
  CHECK(stale_temp(temp_sibling_name("a.ckpt", dead, "12")));
  CHECK(stale_temp("a.ckpt.tmp." + std::to_string(dead)));  // untagged (a link's, older versions')
  CHECK(stale_temp("a.ckpt.tmp." + std::to_string(dead) + ".3"));
  CHECK_FALSE(stale_temp(temp_sibling_name("a.ckpt", ::getpid())));
  CHECK_FALSE(stale_temp(temp_sibling_name("a.ckpt", ::getpid(), "0")));
  CHECK_FALSE(stale_temp("a.ckpt.tmp.h" + other_tag() + "." + std::to_string(dead)));
  CHECK_FALSE(stale_temp("a.ckpt"));
  CHECK_FALSE(stale_temp("a.ckpt.tmp."));
  CHECK_FALSE(stale_temp("a.ckpt.tmp.0"));
  CHECK_FALSE(stale_temp("a.ckpt.tmp.12x"));
  CHECK_FALSE(stale_temp("a.ckpt.tmp.h" + tag + "."));
  CHECK_FALSE(stale_temp("a.ckpt.tmp." + std::to_string(dead) + ".x"));
  CHECK_FALSE(stale_temp("a.ckpt.tmp." + std::to_string(dead) + "."));
  CHECK_FALSE(stale_temp("a.ckpt.tmp.99999999999999999999"));  // not a pid: no overflow
}

TEST_CASE("The next large write of a path removes what killed writers of it left here, and only that",
          "[checkpoint][temp_file]") {
  const std::string dir = temp_dir("temp-file");

  SECTION("a checkpoint file (ArchiveWriter), the path not yet existing") {
    const std::string path = dir + "/epoch=0-step=1.ckpt";
    const Planted planted = plant(path);
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
    const Planted planted = plant(path);
    SafetensorsWriter w(path, {{"w", {at::kFloat, {2}}}});
    w.add("w", torch::ones({2}));
    w.commit();
    check_cleaned(planted);
    CHECK(fs::exists(path));
  }
  SECTION("a dead writer's link is removed, not what it points to") {
    const std::string path = dir + "/linked.ckpt";
    fs::create_directories(dir + "/target");
    touch(dir + "/target/keep");
    const std::string link_to_folder = temp_sibling_name(path, dead_pid());
    const std::string link_to_file = temp_sibling_name(path, dead_pid(), "1");
    fs::create_directory_symlink(dir + "/target", link_to_folder);
    fs::create_symlink(dir + "/target/keep", link_to_file);
    claim_temp_sibling(path);
    CHECK_FALSE(fs::exists(fs::symlink_status(link_to_folder)));
    CHECK_FALSE(fs::exists(fs::symlink_status(link_to_file)));
    CHECK(fs::exists(dir + "/target/keep"));
  }
  SECTION("this process's own writers of the path, and folders, are not touched") {
    const std::string path = dir + "/mine.ckpt";
    const std::string own = claim_temp_sibling(path);
    CHECK(own == temp_sibling_name(path, ::getpid()));
    touch(own);
    const std::string folder = temp_sibling_name(path, dead_pid(), "2");
    fs::create_directories(folder);
    CHECK(claim_temp_sibling(path, "1") == own + ".1");
    CHECK(fs::exists(own));
    CHECK(fs::is_directory(folder));
  }
  SECTION("small files (manifests, markers, predictions) are written without listing the folder") {
    const std::string path = dir + "/small.yaml";
    const std::string left = temp_sibling_name(path, dead_pid());
    touch(left);
    volt::detail::atomic_write(path, "abc", 3);
    CHECK(fs::file_size(path) == 3);
    CHECK(fs::exists(left));  // a checkpoint folder's set-up removes it (ModelCheckpoint)
  }
}
