// scripts/torch2.sh's refusals, which come before it creates, mounts or downloads anything: an
// unknown step, a ROOT that is / or inside the repository, a folder that is neither empty nor a
// trixie tree (debootstrap or chroot would write into it), and a build before the setup. The build and test steps
// themselves need root, debootstrap and Debian's registry, and are run by hand (docs/gpu.md).
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "boring_model.h"

using namespace volt::testing;
namespace fs = std::filesystem;

namespace {
struct Result {
  int code;
  std::string output;
};
Result torch2(const std::string& dir, const std::string& args) {
  const std::string log = dir + "/log";
  const int rc = std::system(
      ("bash " + std::string(VOLT_SOURCE_DIR) + "/scripts/torch2.sh " + args + " > " + log + " 2>&1").c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, read_text(log)};
}
}  // namespace

TEST_CASE("scripts/torch2.sh refuses an unknown step, / or the repository as ROOT, a foreign folder, a build first",
          "[scripts][torch2]") {
  const std::string dir = temp_dir("torch2-script");
  SECTION("an unknown step (a typo would otherwise do nothing and succeed)") {
    const Result r = torch2(dir, dir + "/root setup tests");
    CHECK(r.code == 2);
    CHECK_THAT(r.output, Catch::Contains("unknown step 'tests'") && Catch::Contains("setup build test cuda-syntax"));
    CHECK_FALSE(fs::exists(dir + "/root"));
  }
  SECTION("a step other than setup before there is a tree") {
    const Result r = torch2(dir, dir + "/fresh build test");
    CHECK(r.code == 2);
    CHECK_THAT(r.output, Catch::Contains("has no trixie tree yet: run the setup step first"));
    CHECK_FALSE(fs::exists(dir + "/fresh"));
  }
  SECTION("/ and folders of the repository") {
    for (const std::string& root : {std::string("/"), std::string("/."), std::string(VOLT_SOURCE_DIR),
                                    std::string(VOLT_SOURCE_DIR) + "/build-root-probe"}) {
      INFO(root);
      const Result r = torch2(dir, root + " build");
      CHECK(r.code == 2);
      CHECK_THAT(r.output, Catch::Contains("ROOT must be a folder of its own, outside the repository"));
    }
    CHECK_FALSE(fs::exists(std::string(VOLT_SOURCE_DIR) + "/build-root-probe"));
  }
  SECTION("a folder with other files, or another system's tree") {
    fs::create_directories(dir + "/home");
    std::ofstream(dir + "/home/notes.txt") << "mine\n";
    Result r = torch2(dir, dir + "/home setup");
    CHECK(r.code == 2);
    CHECK_THAT(r.output, Catch::Contains("is neither empty nor a Debian 13 (trixie) tree"));
    fs::create_directories(dir + "/bookworm/etc");
    std::ofstream(dir + "/bookworm/etc/os-release") << "ID=debian\nVERSION_CODENAME=bookworm\n";
    r = torch2(dir, dir + "/bookworm");
    CHECK(r.code == 2);
    CHECK_THAT(r.output, Catch::Contains("is neither empty nor a Debian 13 (trixie) tree"));
    CHECK(fs::directory_iterator(dir + "/bookworm/etc") != fs::directory_iterator());
    CHECK_FALSE(fs::exists(dir + "/bookworm/proc"));
  }
}
