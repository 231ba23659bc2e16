// WikiText2 tokenization against Lightning's Python implementation (golden from
// tests/golden/make_demo_golden.py on ../shared/data/wikitext-2).
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "volt/core/errors.h"
#include "volt/core/files.h"
#include "volt/demos/wikitext2.h"
#include "volt/module/data.h"

using volt::demos::Dictionary;
using volt::demos::WikiText2;

namespace {

const std::string kDataDir = std::string(VOLT_SOURCE_DIR) + "/../shared/data/wikitext-2";

const YAML::Node& golden() {
  static const YAML::Node g = YAML::LoadFile(std::string(VOLT_SOURCE_DIR) + "/tests/golden/demo_wikitext2.json");
  return g;
}

bool have_data() {
  if (std::filesystem::exists(kDataDir + "/valid.txt") && std::filesystem::exists(kDataDir + "/test.txt")) return true;
  WARN("WikiText-2 data not found in " << kDataDir << ": skipped");
  return false;
}

std::vector<int64_t> to_vec(const torch::Tensor& t) {
  auto c = t.contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

std::vector<int64_t> tokenize(const std::string& text, Dictionary& d) {
  std::vector<int64_t> ids;
  volt::demos::tokenize_text(text, d, ids);
  return ids;
}

}  // namespace

TEST_CASE("WikiText2: valid.txt tokenizes as Lightning's WikiText2", "[demos][wikitext2]") {
  if (!have_data()) return;
  const auto g = golden()["valid"];
  const int64_t bs = golden()["block_size"].as<int64_t>();
  WikiText2 ds(kDataDir, "valid.txt");
  CHECK(ds.block_size() == 35);
  CHECK(ds.vocab_size() == g["vocab_size"].as<int64_t>());
  CHECK(ds.data().numel() == g["num_tokens"].as<int64_t>());
  CHECK(ds.data().scalar_type() == torch::kLong);
  CHECK(ds.data().sum().item<int64_t>() == g["id_sum"].as<int64_t>());
  CHECK(ds.size() == g["len"].as<int64_t>());
  CHECK(to_vec(ds.data().slice(0, 0, 50)) == g["first_ids"].as<std::vector<int64_t>>());
  const auto words = g["first_words"].as<std::vector<std::string>>();
  for (size_t i = 0; i < words.size(); ++i) {
    CHECK(ds.dictionary()->word(static_cast<int64_t>(i)) == words[i]);
    CHECK(ds.dictionary()->index(words[i]) == static_cast<int64_t>(i));
  }
  auto check_item = [&](int64_t i, const YAML::Node& expected) {
    INFO("item " << i);
    auto item = ds.get(i);
    REQUIRE(item.size() == 2);
    CHECK(item[0].sizes().vec() == std::vector<int64_t>{bs});
    CHECK(to_vec(item[0]) == expected[0].as<std::vector<int64_t>>());
    CHECK(to_vec(item[1]) == expected[1].as<std::vector<int64_t>>());
  };
  check_item(0, g["item0"]);
  check_item(100, g["item100"]);
  check_item(ds.size() - 1, g["last_item"]);
  CHECK_THROWS_AS(ds.get(ds.size()), volt::DataError);
  CHECK_THROWS_AS(ds.get(-1), volt::DataError);
}

TEST_CASE("WikiText2: splits share a dictionary when given one", "[demos][wikitext2]") {
  if (!have_data()) return;
  auto dict = std::make_shared<Dictionary>();
  WikiText2 valid(kDataDir, "valid.txt", dict);
  WikiText2 test(kDataDir, "test.txt", dict);
  const auto g = golden()["test_shared"];
  CHECK(valid.vocab_size() == g["vocab_size"].as<int64_t>());
  CHECK(test.vocab_size() == g["vocab_size"].as<int64_t>());
  CHECK(test.data().numel() == g["num_tokens"].as<int64_t>());
  CHECK(test.data().sum().item<int64_t>() == g["id_sum"].as<int64_t>());
  CHECK(to_vec(test.data().slice(0, 0, 50)) == g["first_ids"].as<std::vector<int64_t>>());

  WikiText2 alone(kDataDir, "test.txt");
  CHECK(alone.vocab_size() == golden()["test_alone"]["vocab_size"].as<int64_t>());
  CHECK(alone.data().sum().item<int64_t>() == golden()["test_alone"]["id_sum"].as<int64_t>());
}

TEST_CASE("WikiText2: batches through the DataLoader", "[demos][wikitext2]") {
  if (!have_data()) return;
  auto ds = std::make_shared<WikiText2>(kDataDir, "valid.txt");
  volt::DataLoader loader(ds, {4, false, false, 0});
  auto batch = loader.batch(1);
  REQUIRE(batch.size() == 2);
  CHECK(batch[0].sizes().vec() == std::vector<int64_t>{4, 35});
  CHECK(torch::equal(batch[0][0], ds->get(4)[0]));
  CHECK(torch::equal(batch[1][3], ds->get(7)[1]));
}

TEST_CASE("WikiText2: a missing file names its path and where to get it", "[demos][wikitext2]") {
  const std::string dir = std::string(VOLT_SOURCE_DIR) + "/no-such-dir";
  try {
    WikiText2 ds(dir, "train.txt");
    FAIL("no error");
  } catch (const volt::DataError& e) {
    const std::string msg = e.what();
    CHECK_THAT(msg, Catch::Contains(dir + "/train.txt"));
    CHECK_THAT(
        msg,
        Catch::Contains(
            "https://raw.githubusercontent.com/pytorch/examples/main/word_language_model/data/wikitext-2/train.txt"));
    CHECK_THAT(msg, Catch::Contains("shared/data/wikitext-2"));
  }
}

TEST_CASE("WikiText2: line breaks and whitespace as Python's split", "[demos][wikitext2]") {
  Dictionary d;
  // lines: "a b", "", " c  a", "b\xc2\xa0d" (no-break space), "e\xe3\x80\x80f" (ideographic space), "g"
  auto ids = tokenize(
      "a b\n\r\n c  a\rb\xc2\xa0"
      "d\ne\xe3\x80\x80"
      "f\tg",
      d);
  // a=0 b=1 <eos>=2 c=3 d=4 e=5 f=6 g=7
  CHECK(ids == std::vector<int64_t>{0, 1, 2, 2, 3, 0, 2, 1, 4, 2, 5, 6, 7, 2});
  CHECK(d.size() == 8);
  CHECK(d.word(2) == "<eos>");
  // A trailing line break ends the last line; nothing after it is another line.
  Dictionary d2;
  CHECK(tokenize("x\n", d2) == std::vector<int64_t>{0, 1});
  CHECK(tokenize("", d2).empty());
  CHECK(tokenize(" \n", d2) == std::vector<int64_t>{1});
  // \v, \f, \x1c and U+0085 split words but, as in Python's file iteration, do not end lines.
  Dictionary d4;
  CHECK(tokenize("a\vb\fc\x1c"
                 "d\xc2\x85"
                 "e",
                 d4) == std::vector<int64_t>{0, 1, 2, 3, 4, 5});
  // Non-space multi-byte characters stay inside words.
  Dictionary d3;
  CHECK(tokenize("caf\xc3\xa9 \xe2\x80\x94", d3) == std::vector<int64_t>{0, 1, 2});
  CHECK(d3.word(0) == "caf\xc3\xa9");
}

TEST_CASE("WikiText2: a short file has no items", "[demos][wikitext2]") {
  const auto dir = std::filesystem::temp_directory_path() / "volt_test_wikitext2";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tiny.txt") << "one two three\nfour\n";
  WikiText2 ds(dir.string(), "tiny.txt", nullptr, 4);
  CHECK(ds.data().numel() == 6);
  CHECK(ds.size() == 0);  // 6 // 4 - 1
  WikiText2 ds2(dir.string(), "tiny.txt", nullptr, 2);
  CHECK(ds2.size() == 2);
  CHECK(to_vec(ds2.get(1)[1]) == std::vector<int64_t>{3, 4});
  volt::detail::remove_tree(dir.string());  // not std::filesystem::remove_all: see core/files.h
}
