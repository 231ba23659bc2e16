// A checkpoint re-zipped with compression (`zip -r`, or a torch.save file re-compressed) is refused
// with a message naming the file, the compressed entry and its method, not reported as truncated;
// stored again without compression it loads. The zips are rewritten with Python's zipfile.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "boring_model.h"
#include "checkpoint_support.h"
#include "volt/checkpoint/checkpoint.h"
#include "volt/checkpoint/tensor_archive.h"

using namespace volt;
using namespace volt::testing;
using Catch::Matchers::Contains;

namespace {

const char* const kPython = "/usr/bin/python3";

/// Rewrites the zip `src` as `dst`: entries named in `deflate` (all if empty) deflate-compressed,
/// the others stored. Returns false where no Python is available.
bool rezip(const std::string& src, const std::string& dst, const std::string& deflate = "") {
  if (!std::filesystem::exists(kPython)) return false;
  const std::string dir = std::filesystem::path(dst).parent_path().string();
  {
    std::ofstream out(dir + "/rezip.py");
    out << "import sys, zipfile\n"
           "src, dst, only = sys.argv[1], sys.argv[2], sys.argv[3]\n"
           "with zipfile.ZipFile(src) as zi, zipfile.ZipFile(dst, 'w') as zo:\n"
           "    for info in zi.infolist():\n"
           "        packed = only == '' or info.filename.endswith(only)\n"
           "        method = zipfile.ZIP_DEFLATED if packed else zipfile.ZIP_STORED\n"
           "        zo.writestr(info.filename, zi.read(info.filename), compress_type=method)\n";
  }
  const auto codes = run_processes({{kPython, dir + "/rezip.py", src, dst, deflate}}, {}, 120, dir + "/rezip");
  INFO(read_text(dir + "/rezip.0.log"));
  REQUIRE(codes.at(0) == 0);
  return true;
}

std::string saved_checkpoint(const std::string& dir) {
  Checkpoint c;
  c.global_step = 7;
  c.state_dict["w"] = torch::arange(1000, torch::kFloat);  // compresses well: deflate shrinks it
  c.state_dict["b"] = torch::ones({3});
  const std::string path = dir + "/a.ckpt";
  save_checkpoint_file(c, path);
  return path;
}

}  // namespace

TEST_CASE("A checkpoint whose zip entries are compressed is refused, naming the entry and the method", "[checkpoint]") {
  const std::string dir = temp_dir("ckpt-deflate");
  const std::string path = saved_checkpoint(dir);
  SECTION("every entry compressed (zip -r)") {
    const std::string packed = dir + "/packed.ckpt";
    if (!rezip(path, packed)) {
      WARN("skipped: no " << kPython);
      return;
    }
    const std::string msg = checkpoint_error([&] { load_checkpoint_file(packed); });
    CHECK_THAT(msg, Contains(packed) && Contains("compressed (method 8, deflate)") && Contains("zip -0"));
    CHECK_THAT(msg, !Contains("truncated"));
  }
  SECTION("one tensor's entry compressed") {
    const std::string packed = dir + "/one.ckpt";
    if (!rezip(path, packed, "data/0")) {
      WARN("skipped: no " << kPython);
      return;
    }
    const std::string msg = checkpoint_error([&] { ArchiveReader r(packed); });
    CHECK_THAT(msg, Contains("entry 'archive/data/0'") && Contains("method 8"));
  }
  SECTION("stored again without compression, it loads") {
    const std::string stored = dir + "/stored.ckpt";
    if (!rezip(path, stored, "no-such-entry")) {
      WARN("skipped: no " << kPython);
      return;
    }
    Checkpoint c = load_checkpoint_file(stored);
    CHECK(c.global_step == 7);
    CHECK(torch::equal(c.state_dict.at("w"), torch::arange(1000, torch::kFloat)));
  }
}
