// Fetching missing data files (core/download.h) through WikiText2Data's `url`, tested offline with
// file:// URLs; and the errors when a file is missing or the URL is bad.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "boring_model.h"
#include "volt/core/download.h"
#include "volt/core/errors.h"
#include "volt/demos/wikitext2.h"
#include "volt/demos/wikitext2_data.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

/// Two small splits in WikiText-2's format (enough tokens for a few blocks of 4).
void write_splits(const std::string& dir) {
  fs::create_directories(dir);
  std::ofstream(dir + "/valid.txt") << " = Valkyria Chronicles = \n\n the game was released in japan . \n"
                                    << " the game began development in 2010 . \n the music was composed . \n";
  std::ofstream(dir + "/test.txt") << " = Robert Boulter = \n\n robert boulter is an english actor . \n"
                                   << " the game was a success . \n";
}

/// Runs f and returns the DataError's message; fails the test if f throws nothing or something else.
template <class F>
std::string data_error(F&& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("expected a DataError, got: " << e.what());
  }
  FAIL("expected a DataError, nothing was thrown");
  return {};
}

/// True when this volt was built without libcurl (download_file then always refuses, saying so).
bool built_without_curl() {
  const std::string dir = temp_dir("download-probe");
  write_splits(dir + "/src");
  try {
    download_file("file://" + dir + "/src/test.txt", dir + "/out/test.txt");
  } catch (const DataError& e) {
    if (std::string(e.what()).find("without libcurl") != std::string::npos) {
      WARN("volt built without libcurl: download checks skipped");
      return true;
    }
    throw;
  }
  return false;
}

bool has_partial_files(const std::string& dir) {
  if (!fs::exists(dir)) return false;
  for (auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().filename().string().find(".part") != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("download_file copies a file:// URL atomically", "[download]") {
  if (built_without_curl()) return;
  const std::string dir = temp_dir("download");
  write_splits(dir + "/src");
  const std::string dest = dir + "/a/b/valid.txt";  // parent directories are created
  download_file("file://" + dir + "/src/valid.txt", dest);
  REQUIRE(fs::exists(dest));
  CHECK(read_text(dest) == read_text(dir + "/src/valid.txt"));
  CHECK_FALSE(has_partial_files(dir + "/a"));

  // A missing source names the URL and leaves nothing behind.
  const std::string url = "file://" + dir + "/src/missing.txt";
  const std::string msg = data_error([&] { download_file(url, dir + "/c/missing.txt"); });
  CHECK_THAT(msg, Contains(url));
  CHECK_FALSE(fs::exists(dir + "/c/missing.txt"));
  CHECK_FALSE(has_partial_files(dir + "/c"));
}

TEST_CASE("WikiText2Data fetches missing files from a file:// url and loads them", "[download][demos][wikitext2]") {
  if (built_without_curl()) return;
  const std::string dir = temp_dir("download-wt2");
  const std::string src = dir + "/mirror";
  write_splits(src);
  demos::WikiText2DataOptions o;
  o.data_dir = dir + "/data";  // does not exist yet
  o.url = "file://" + src;     // no trailing slash: WikiText2Data adds it
  o.block_size = 4;
  o.batch_size = 2;
  o.shuffle = false;
  demos::WikiText2Data data(o);
  data.prepare_data();  // fetches the missing files
  data.setup("fit");
  CHECK(fs::exists(dir + "/data/valid.txt"));
  CHECK(fs::exists(dir + "/data/test.txt"));
  CHECK(read_text(dir + "/data/valid.txt") == read_text(src + "/valid.txt"));
  CHECK_FALSE(has_partial_files(dir + "/data"));

  // Loaded as from the mirror itself: same vocabulary and token ids.
  auto dict = std::make_shared<demos::Dictionary>();
  demos::WikiText2 valid(src, "valid.txt", dict, 4);
  demos::WikiText2 test(src, "test.txt", dict, 4);
  CHECK(data.vocab_size() == dict->size());
  auto train_loader = data.train_loader();
  REQUIRE(train_loader->num_batches() == (valid.size() + 1) / 2);
  CHECK(torch::equal(train_loader->batch(0)[0][1], valid.get(1)[0]));
  auto val_loader = data.val_loader();
  REQUIRE(val_loader != nullptr);
  CHECK(torch::equal(val_loader->batch(0)[1][0], test.get(0)[1]));

  // With the files present, nothing is fetched again (the url may even be gone).
  o.url = "file://" + dir + "/no-such-mirror";
  demos::WikiText2Data again(o);
  CHECK(again.vocab_size() == data.vocab_size());

  // Only the missing file is fetched; a base URL with a trailing slash works too.
  fs::remove(dir + "/data/test.txt");
  o.url = "file://" + src + "/";
  demos::WikiText2Data partial(o);
  partial.prepare_data();
  CHECK(read_text(dir + "/data/test.txt") == read_text(src + "/test.txt"));
}

TEST_CASE("WikiText2Data: a missing file without url says where to get it", "[download][demos][wikitext2]") {
  const std::string dir = temp_dir("download-none") + "/empty";
  demos::WikiText2DataOptions o;
  o.data_dir = dir;
  const std::string msg = data_error([&] {
    demos::WikiText2Data data(o);
    data.prepare_data();
    data.setup("fit");
  });
  CHECK_THAT(msg, Contains(dir + "/valid.txt"));
  CHECK_THAT(msg, Contains(demos::WikiText2::download_url("valid.txt")));
  CHECK_THAT(msg, Contains("data.url"));
}

TEST_CASE("WikiText2Data: a bad file:// url is a DataError naming the URL", "[download][demos][wikitext2]") {
  const std::string dir = temp_dir("download-bad");
  demos::WikiText2DataOptions o;
  o.data_dir = dir + "/data";
  o.url = "file://" + dir + "/no-such-mirror";
  const std::string msg = data_error([&] { demos::WikiText2Data(o).prepare_data(); });
  // Built without libcurl the message names the URL too (and says why it cannot fetch).
  CHECK_THAT(msg, Contains(o.url + "/valid.txt"));
  CHECK_FALSE(fs::exists(dir + "/data/valid.txt"));
  CHECK_FALSE(has_partial_files(dir));
}
