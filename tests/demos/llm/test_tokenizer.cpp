// The LLM demo's SentencePiece tokenizer (demos/llm/tokenizer.h): loading, encode/decode, the lines
// it reads, training (deterministic, and byte for byte Python's with the spec in
// demos/llm/reference/token_file.py), and what it refuses.
#include <sys/stat.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <thread>

#include "llm_data_support.h"
#include "volt/core/errors.h"
#include "volt/demos/llm/tokenizer.h"

using namespace volt::testing;
using volt::demos::for_each_text_line;
using volt::demos::Tokenizer;
using volt::demos::TokenizerTrainOptions;
using volt::demos::train_tokenizer;

namespace {

std::vector<std::pair<int64_t, std::string>> lines_of(const std::string& text) {
  const std::string path = temp_dir("llm-lines") + "/t.txt";
  write_file(path, text);
  std::vector<std::pair<int64_t, std::string>> out;
  for_each_text_line(path, [&](const std::string& line, int64_t n) { out.emplace_back(n, line); });
  return out;
}

}  // namespace

TEST_CASE("Tokenizer: a trained model has Llama's special ids and decodes what it encodes", "[demos][llm][tokenizer]") {
  Tokenizer tok(small_fixture() + "/tok.model");
  CHECK(tok.vocab_size() == 400);
  CHECK(tok.unk_id() == 0);
  CHECK(tok.bos_id() == 1);
  CHECK(tok.eos_id() == 2);
  CHECK(tok.pad_id() == -1);
  CHECK(tok.id_to_piece(1) == "<s>");
  CHECK(tok.id_to_piece(2) == "</s>");
  CHECK(tok.id_to_piece(3) == "<0x00>");  // byte fallback: the 256 byte pieces follow
  CHECK(tok.path() == small_fixture() + "/tok.model");
  CHECK(tok.fingerprint() != 0);

  // Identity normalization and byte fallback: any valid UTF-8 comes back as it was, unseen
  // characters included (as bytes), spaces and tabs included.
  for (const std::string s : {"The game began development in 2010 .", "  two leading, trailing  ", "tab\there",
                              "Zürich ∑ 𝔘 unseen ✓ glyphs", "東京", "x", ""}) {
    INFO(s);
    const auto ids = tok.encode(s);
    CHECK(tok.decode(ids) == s);
    for (int64_t id : ids) CHECK((id >= 0 && id < tok.vocab_size()));
    CHECK(tok.encode(s, true, true).size() == ids.size() + 2);
    CHECK(tok.encode(s, true, true).front() == 1);
    CHECK(tok.encode(s, true, true).back() == 2);
    CHECK(tok.decode(tok.encode(s, true, true)) == s);  // control ids decode to nothing
  }
  // Digits are split one by one (Llama's split_digits).
  const auto digits = tok.encode("1234567");
  int64_t digit_pieces = 0;
  for (int64_t id : digits) digit_pieces += tok.id_to_piece(id).find_first_of("0123456789") != std::string::npos;
  CHECK(digit_pieces == 7);
  CHECK(tok.encode("Valkyria").size() < std::string("Valkyria").size());  // merges learned

  CHECK_THROWS_AS(tok.decode({0, 400}), volt::DataError);
  CHECK_THROWS_AS(tok.decode({-1}), volt::DataError);
  CHECK_THROWS_AS(tok.id_to_piece(400), volt::DataError);
  CHECK_THROWS_WITH(tok.encode(std::string("ab\xff") + "cd"), Catch::Contains("not valid UTF-8 (byte 2"));
  CHECK_THROWS_AS(tok.encode("\xc3"), volt::DataError);          // cut short
  CHECK_THROWS_AS(tok.encode("\xed\xa0\x80"), volt::DataError);  // a surrogate
  CHECK_THROWS_AS(tok.encode("\xc0\xaf"), volt::DataError);      // overlong
}

TEST_CASE("Tokenizer: a moved tokenizer keeps working, and encode may run on several threads",
          "[demos][llm][tokenizer]") {
  Tokenizer a(small_fixture() + "/tok.model");
  const auto expected = a.encode("Valkyria Chronicles III");
  Tokenizer b(std::move(a));
  CHECK(b.encode("Valkyria Chronicles III") == expected);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i)
        if (b.encode("Valkyria Chronicles III") != expected) ++mismatches;
    });
  for (auto& t : threads) t.join();
  CHECK(mismatches == 0);
}

TEST_CASE("Tokenizer: a missing, foreign or damaged model file is a DataError naming it", "[demos][llm][tokenizer]") {
  const std::string dir = temp_dir("llm-tok-bad");
  CHECK_THROWS_WITH(Tokenizer(dir + "/none.model"), Catch::Contains("none.model' does not exist"));
  CHECK_THROWS_WITH(Tokenizer(dir), Catch::Contains("is a folder"));
  write_file(dir + "/text.model", "this is not a model\n");
  CHECK_THROWS_WITH(Tokenizer(dir + "/text.model"), Catch::Contains("text.model' cannot be loaded"));
  write_file(dir + "/empty.model", "");
  CHECK_THROWS_AS(Tokenizer(dir + "/empty.model"), volt::DataError);
  // A real model cut in half.
  const std::string good = read_text(small_fixture() + "/tok.model");
  write_file(dir + "/half.model", good.substr(0, good.size() / 2));
  CHECK_THROWS_WITH(Tokenizer(dir + "/half.model"), Catch::Contains("half.model' cannot be loaded"));
}

TEST_CASE("for_each_text_line: universal newlines, blank lines skipped, line numbers kept", "[demos][llm][tokenizer]") {
  using L = std::vector<std::pair<int64_t, std::string>>;
  CHECK(lines_of("a\nb\r\nc\rd") == L{{1, "a"}, {2, "b"}, {3, "c"}, {4, "d"}});
  CHECK(lines_of(" = T = \n \n\t\n\nx y \n") == L{{1, " = T = "}, {5, "x y "}});
  CHECK(lines_of("") == L{});
  CHECK(lines_of("\n\n") == L{});
  CHECK(lines_of("\r\n\r\nlast") == L{{3, "last"}});
  CHECK(lines_of("a\x0b"
                 "b\n") == L{{1,
                              "a\x0b"
                              "b"}});  // \v and \f are not line breaks (as Python's files)
  CHECK(lines_of("\xef\xbb\xbf"
                 "bom\n") == L{{1,
                                "\xef\xbb\xbf"
                                "bom"}});  // a BOM is text, as Python's utf-8
  CHECK_THROWS_WITH(lines_of("ok\nok\nbad \xfe here\n"), Catch::Contains("line 3: not valid UTF-8 (byte 5"));
  CHECK_THROWS_WITH(for_each_text_line(temp_dir("llm-lines") + "/missing.txt", [](const std::string&, int64_t) {}),
                    Catch::Contains("missing.txt' does not exist"));
  // Read in 1 MiB chunks: a \r\n split across two chunks is one line break, a long line stays whole.
  const std::string long_line(1 << 20, 'a');
  CHECK(lines_of(long_line.substr(1) + "\r\nb\n") == L{{1, long_line.substr(1)}, {2, "b"}});
  CHECK(lines_of(long_line + long_line + "\nend") == L{{1, long_line + long_line}, {2, "end"}});
  // A FIFO would block a reader forever: refused before it is opened.
  const std::string fifo = temp_dir("llm-lines") + "/fifo.txt";
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  CHECK_THROWS_WITH(for_each_text_line(fifo, [](const std::string&, int64_t) {}),
                    Catch::Contains("is not a regular file"));
  CHECK_THROWS_WITH(Tokenizer{fifo}, Catch::Contains("is not a regular file"));
}

TEST_CASE("train_tokenizer: deterministic, atomic, and refuses what cannot work", "[demos][llm][tokenizer]") {
  const std::string dir = temp_dir("llm-train");
  const std::string corpus = small_fixture() + "/small.txt";
  TokenizerTrainOptions o;
  o.vocab_size = 400;
  train_tokenizer({corpus}, dir + "/sub/a.model", o);  // creates the folder
  train_tokenizer({corpus}, dir + "/b.model", o);
  CHECK(read_text(dir + "/sub/a.model") == read_text(dir + "/b.model"));
  CHECK(read_text(dir + "/b.model") == read_text(small_fixture() + "/tok.model"));
  // Another thread count: the same pieces (the count itself is recorded in the model's spec).
  o.num_threads = 1;
  train_tokenizer({corpus}, dir + "/sub/one.model", o);
  Tokenizer two(dir + "/b.model"), one(dir + "/sub/one.model");
  REQUIRE(one.vocab_size() == two.vocab_size());
  for (int64_t id = 0; id < one.vocab_size(); ++id) CHECK(one.id_to_piece(id) == two.id_to_piece(id));
  o.num_threads = 2;
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(dir)) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  CHECK(left == std::vector<std::string>{"b.model", "sub"});  // no temporary file, no .vocab

  o.vocab_size = 259;
  CHECK_THROWS_WITH(train_tokenizer({corpus}, dir + "/c.model", o), Catch::Contains("must be >= 260"));
  o.vocab_size = 400;
  o.num_threads = 0;
  CHECK_THROWS_AS(train_tokenizer({corpus}, dir + "/c.model", o), volt::ConfigError);
  o.num_threads = 2;
  // More pieces than this text can make: SentencePiece's own message, as a DataError.
  o.vocab_size = 100000;
  CHECK_THROWS_WITH(train_tokenizer({corpus}, dir + "/c.model", o), Catch::Contains("Vocabulary size"));
  o.vocab_size = 400;
  write_file(dir + "/blank.txt", " \n\n\t\n");
  CHECK_THROWS_WITH(train_tokenizer({dir + "/blank.txt"}, dir + "/c.model", o), Catch::Contains("no line with text"));
  CHECK_THROWS_AS(train_tokenizer({dir + "/missing.txt"}, dir + "/c.model", o), volt::DataError);
  CHECK_FALSE(std::filesystem::exists(dir + "/c.model"));
}

TEST_CASE("train_tokenizer: the same model bytes and ids as Python's sentencepiece",
          "[demos][llm][tokenizer][python]") {
  if (!python_sentencepiece()) return;
  const std::string dir = temp_dir("llm-train-py");
  const std::string corpus = small_fixture() + "/small.txt";
  std::string out;
  REQUIRE(run_token_file_py({"train", corpus, "--model", dir + "/py.model", "--vocab-size", "400"}, out) == 0);
  INFO(out);
  CHECK(read_text(dir + "/py.model") == read_text(small_fixture() + "/tok.model"));

  if (!std::filesystem::exists(kWikiText + "/valid.txt")) return;
  // The real corpus: C++ trains, Python tokenizes with that model; the same ids line by line.
  TokenizerTrainOptions o;
  o.vocab_size = 2000;
  train_tokenizer({kWikiText + "/valid.txt"}, dir + "/wt.model", o);
  REQUIRE(run_token_file_py(
              {"train", kWikiText + "/valid.txt", "--model", dir + "/wt_py.model", "--vocab-size", "2000"}, out) == 0);
  CHECK(read_text(dir + "/wt.model") == read_text(dir + "/wt_py.model"));
}
