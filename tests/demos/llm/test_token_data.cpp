// The LLM demo's data (demos/llm/token_file.h, token_data.h): token files written and read back,
// windows of block_size + 1 tokens as {"input_ids", "labels"}, what damaged or foreign files give,
// the data module's files kept, remade and refused, a Trainer fed by it, and the format read and
// written by the Python reference (demos/llm/reference/token_file.py).
#include <sys/stat.h>
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "llm_data_support.h"
#include "volt/checkpoint/temp_file.h"
#include "volt/checkpoint/tensor_archive.h"
#include "volt/core/errors.h"
#include "volt/demos/llm/llama_lm.h"
#include "volt/demos/llm/token_data.h"
#include "volt/demos/llm/token_file.h"
#include "volt/demos/llm/tokenizer.h"
#include "volt/module/lightning_module.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;
using demos::TokenData;
using demos::TokenDataOptions;
using demos::TokenFile;
using demos::TokenFileHeader;
using demos::Tokenizer;
using demos::TokenWindows;
namespace fs = std::filesystem;

namespace {

/// The ids the format promises for `text_path`: per non-blank line, <s> + encode(line) + </s>.
std::vector<int64_t> expected_ids(const Tokenizer& tok, const std::string& text_path, bool bos, bool eos) {
  std::vector<int64_t> ids;
  demos::for_each_text_line(text_path, [&](const std::string& line, int64_t) {
    const auto l = tok.encode(line, bos, eos);
    ids.insert(ids.end(), l.begin(), l.end());
  });
  return ids;
}

std::vector<int64_t> all_ids(const TokenFile& f) { return to_vec(f.read(0, f.num_tokens())); }

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void put(std::string& b, size_t at, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

/// A token file made byte by byte, independent of the writer.
std::string craft(uint32_t token_bytes, uint64_t vocab, const std::vector<uint64_t>& ids, uint64_t declared = ~0ull) {
  std::string b(64, '\0');
  std::memcpy(&b[0], "VOLTTOK1", 8);
  put(b, 8, token_bytes, 4);
  put(b, 16, declared == ~0ull ? ids.size() : declared, 8);
  put(b, 24, vocab, 8);
  for (uint64_t id : ids) {
    b.resize(b.size() + token_bytes);
    put(b, b.size() - token_bytes, id, static_cast<int>(token_bytes));
  }
  return b;
}

TokenDataOptions small_options(const std::string& dir) {
  TokenDataOptions o;
  o.data_dir = small_fixture();
  o.train_file = "small.txt";
  o.val_file = "small.txt";
  o.test_file = "small.txt";
  o.cache_dir = dir + "/cache";
  o.tokenizer_vocab_size = 400;
  o.block_size = 16;
  o.batch_size = 4;
  return o;
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

fs::file_time_type mtime(const std::string& path) { return fs::last_write_time(path); }

/// Embedding -> Linear over the vocabulary: enough to take the batches through a Trainer.
struct TinyLM : LightningModule {
  torch::nn::Embedding emb{nullptr};
  torch::nn::Linear head{nullptr};
  int64_t vocab, block;
  std::vector<std::vector<int64_t>> shapes;
  TinyLM(int64_t v, int64_t t) : vocab(v), block(t) {
    emb = register_module("emb", torch::nn::Embedding(v, 8));
    head = register_module("head", torch::nn::Linear(8, v));
  }
  torch::Tensor training_step(const Batch& b, int64_t) override {
    const auto& x = b["input_ids"];
    const auto& y = b["labels"];
    shapes.push_back(x.sizes().vec());
    CHECK(x.scalar_type() == torch::kLong);
    CHECK(torch::equal(x.slice(1, 1), y.slice(1, 0, block - 1)));
    auto loss = torch::cross_entropy_loss(head->forward(emb->forward(x)).view({-1, vocab}), y.view(-1));
    log("train_loss", loss);
    return loss;
  }
  void validation_step(const Batch& b, int64_t) override {
    log("val_loss",
        torch::cross_entropy_loss(head->forward(emb->forward(b["input_ids"])).view({-1, vocab}), b["labels"].view(-1)));
  }
  Optimizers configure_optimizers() override {
    return {std::make_shared<torch::optim::AdamW>(parameters(), torch::optim::AdamWOptions(1e-2))};
  }
};

}  // namespace

TEST_CASE("Token files: the ids of each line with <s> and </s>, a header that says so", "[demos][llm][data]") {
  const std::string dir = temp_dir("llm-tokfile");
  const std::string text = small_fixture() + "/small.txt";
  Tokenizer tok(small_fixture() + "/tok.model");
  // What a killed writer of the same file left goes with the first write (files_in below).
  fs::create_directories(dir + "/sub");
  write_file(volt::detail::temp_sibling_name(dir + "/sub/t.tok", dead_pid(), "0"), "half a token file");
  for (auto [bos, eos] :
       {std::pair{true, true}, std::pair{true, false}, std::pair{false, true}, std::pair{false, false}}) {
    INFO("bos " << bos << " eos " << eos);
    const std::string path = dir + "/sub/t.tok";
    const TokenFileHeader h = demos::write_token_file(text, tok, bos, eos, path);
    TokenFile f(path);
    CHECK(all_ids(f) == expected_ids(tok, text, bos, eos));
    CHECK(f.header().num_tokens == h.num_tokens);
    CHECK(f.header().token_bytes == 2);
    CHECK(f.header().flags == (bos ? 1u : 0u) + (eos ? 2u : 0u));
    CHECK(f.header().vocab_size == 400);
    CHECK(f.header().tokenizer == tok.fingerprint());
    const auto stamp = demos::SourceStamp::of(text);
    CHECK(f.header().source_size == stamp.size);
    CHECK(f.header().source_mtime_ns == stamp.mtime_ns);
    CHECK(static_cast<int64_t>(fs::file_size(path)) == 64 + 2 * h.num_tokens);
    CHECK(files_in(dir + "/sub") == std::vector<std::string>{"t.tok"});  // no temporary file left
  }
  // A text with no text.
  write_file(dir + "/blank.txt", "\n  \n");
  CHECK_THROWS_WITH(demos::write_token_file(dir + "/blank.txt", tok, true, true, dir + "/b.tok"),
                    Catch::Contains("holds no text"));
  CHECK_FALSE(fs::exists(dir + "/b.tok"));
  // Not UTF-8: the line is named, nothing is left behind.
  write_file(dir + "/latin1.txt", "fine\ncaf\xe9\n");
  CHECK_THROWS_WITH(demos::write_token_file(dir + "/latin1.txt", tok, true, true, dir + "/l.tok"),
                    Catch::Contains("line 2: not valid UTF-8"));
  CHECK(files_in(dir) == std::vector<std::string>{"blank.txt", "latin1.txt", "sub"});
  // A folder where the file should go: the error names it and the temporary file is gone.
  fs::create_directories(dir + "/taken.tok");
  CHECK_THROWS_AS(demos::write_token_file(text, tok, true, true, dir + "/taken.tok"), DataError);
  CHECK(files_in(dir) == std::vector<std::string>{"blank.txt", "latin1.txt", "sub", "taken.tok"});
}

TEST_CASE("Token files: windows of block_size + 1 tokens as input_ids and labels", "[demos][llm][data]") {
  const std::string dir = temp_dir("llm-windows");
  // 4-byte ids above 65535, so the width is exercised too.
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < 23; ++i) ids.push_back(70000 + i);
  write_file(dir + "/w4.tok", craft(4, 80000, ids));
  auto file = std::make_shared<const TokenFile>(dir + "/w4.tok");
  CHECK(file->num_tokens() == 23);
  TokenWindows w(file, 5);
  CHECK(w.size() == 4);  // (23 - 1) / 5: tokens 21 and 22 fill no window
  for (int64_t i = 0; i < w.size(); ++i) {
    const Batch b = w.get(i);
    CHECK(b.names() == std::vector<std::string>{"input_ids", "labels"});
    CHECK(b.size() == 0);
    std::vector<int64_t> x, y;
    for (int64_t k = 0; k < 5; ++k) {
      x.push_back(70000 + i * 5 + k);
      y.push_back(70000 + i * 5 + k + 1);
    }
    CHECK(to_vec(b["input_ids"]) == x);
    CHECK(to_vec(b["labels"]) == y);
    CHECK(b["input_ids"].scalar_type() == torch::kLong);
  }
  CHECK_THROWS_AS(w.get(4), DataError);
  CHECK_THROWS_AS(w.get(-1), DataError);
  CHECK(TokenWindows(file, 22).size() == 1);  // exactly one window
  CHECK_THROWS_WITH(TokenWindows(file, 23), Catch::Contains("holds 23 tokens, fewer than one window"));
  CHECK_THROWS_AS(TokenWindows(file, 0), ConfigError);
  CHECK_THROWS_AS(file->read(20, 4), DataError);
  CHECK_THROWS_AS(file->read(-1, 2), DataError);
  CHECK(file->read(23, 0).numel() == 0);

  // The loader stacks them to [B, T].
  DataLoader loader(std::make_shared<TokenWindows>(file, 5), DataLoaderOptions{3, false, false, 0});
  auto stream = loader.iterate();
  const auto first = stream.next();
  REQUIRE(first.has_value());
  CHECK((*first)["input_ids"].sizes().vec() == std::vector<int64_t>{3, 5});
  CHECK((*first)["labels"].sizes().vec() == std::vector<int64_t>{3, 5});
}

TEST_CASE("Token files: damaged or foreign files are DataErrors that say what is wrong", "[demos][llm][data]") {
  const std::string dir = temp_dir("llm-damaged");
  auto open = [&](const std::string& bytes) {
    write_file(dir + "/f.tok", bytes);
    TokenFile f(dir + "/f.tok");
  };
  const std::vector<uint64_t> ids = {1, 2, 3, 4, 5};
  REQUIRE_NOTHROW(open(craft(2, 10, ids)));
  CHECK_THROWS_WITH(open("hello world, not tokens at all, but long enough for a header........"),
                    Catch::Contains("is not a volt token file"));
  CHECK_THROWS_WITH(open(""), Catch::Contains("is not a volt token file"));
  std::string v2 = craft(2, 10, ids);
  v2[7] = '2';
  CHECK_THROWS_WITH(open(v2), Catch::Contains("format version '2'"));
  CHECK_THROWS_WITH(open(craft(2, 10, ids).substr(0, 40)), Catch::Contains("shorter than its 64-byte header"));
  CHECK_THROWS_WITH(open(craft(2, 10, ids).substr(0, 70)), Catch::Contains("it is truncated or damaged"));
  CHECK_THROWS_WITH(open(craft(2, 10, ids) + "x"), Catch::Contains("it is truncated or damaged"));
  CHECK_THROWS_WITH(open(craft(2, 10, ids, 1ull << 62)), Catch::Contains("it is truncated or damaged"));
  CHECK_THROWS_WITH(open(craft(3, 10, ids)), Catch::Contains("token width 3 bytes"));
  CHECK_THROWS_WITH(open(craft(2, 65537, ids)), Catch::Contains("does not fit its 2-byte ids"));
  CHECK_THROWS_WITH(open(craft(2, 0, ids)), Catch::Contains("vocab_size 0"));
  std::string flags = craft(2, 10, ids);
  flags[12] = 8;
  CHECK_THROWS_WITH(open(flags), Catch::Contains("unknown flags 8"));
  CHECK_THROWS_WITH(TokenFile(dir + "/none.tok"), Catch::Contains("none.tok' cannot be opened"));
  REQUIRE(::mkfifo((dir + "/fifo.tok").c_str(), 0644) == 0);
  CHECK_THROWS_WITH(TokenFile(dir + "/fifo.tok"), Catch::Contains("is not a regular file"));  // and no hang
  CHECK_THROWS_WITH(TokenFile(dir), Catch::Contains("is a folder"));

  // An id at or above vocab_size: found when its window is read.
  write_file(dir + "/bad_id.tok", craft(2, 10, {1, 2, 3, 4, 10, 5, 6}));
  TokenWindows w(std::make_shared<const TokenFile>(dir + "/bad_id.tok"), 2);
  CHECK_NOTHROW(w.get(0));
  CHECK_THROWS_WITH(w.get(1), Catch::Contains("token 4 is 10, not below the file's vocab_size 10"));

  // A file cut short after it was opened (pread, not a mapping: an error, not SIGBUS).
  write_file(dir + "/shrinks.tok", craft(2, 10, {1, 2, 3, 4, 5, 6, 7, 8}));
  TokenWindows s(std::make_shared<const TokenFile>(dir + "/shrinks.tok"), 3);
  fs::resize_file(dir + "/shrinks.tok", 64 + 4);
  CHECK_THROWS_WITH(s.get(1), Catch::Contains("the file shrank since it was opened"));
}

TEST_CASE("TokenData: trains its tokenizer, writes token files once, batches input_ids and labels",
          "[demos][llm][data]") {
  const std::string dir = temp_dir("llm-datamodule");
  const TokenDataOptions o = small_options(dir);
  TokenData data(o);
  CHECK_THROWS_WITH(data.vocab_size(), Catch::Contains("after setup()"));
  CHECK_THROWS_AS(data.train_dataloader(), ConfigError);
  data.prepare_data();
  const std::string model = o.tokenizer_path();
  CHECK(fs::path(model).parent_path() == fs::path(o.cache_dir));
  CHECK(fs::path(model).filename().string().rfind("small.txt.sp400.", 0) == 0);
  CHECK(fs::path(model).extension() == ".model");
  REQUIRE(fs::exists(model));
  CHECK(read_text(model) == read_text(small_fixture() + "/tok.model"));  // the same recipe, the same model
  const std::string tokens = data.token_file_path("small.txt");
  CHECK(fs::path(tokens).parent_path() == fs::path(o.cache_dir));
  CHECK(files_in(o.cache_dir) ==
        std::vector<std::string>{fs::path(tokens).filename().string(), fs::path(model).filename().string()});
  data.setup("fit");
  CHECK(data.vocab_size() == 400);
  REQUIRE(data.tokenizer() != nullptr);
  CHECK(data.tokenizer()->path() == model);
  CHECK(data.val_split() == data.test_split());  // one file, opened once
  const int64_t n = data.train_split()->file().num_tokens();
  CHECK(n == static_cast<int64_t>(expected_ids(*data.tokenizer(), small_fixture() + "/small.txt", true, true).size()));
  CHECK(data.train_split()->size() == (n - 1) / 16);

  auto loader = data.train_dataloader();
  CHECK(loader->num_batches() == (data.train_split()->size() + 3) / 4);
  auto stream = loader->iterate();
  const auto b = stream.next();
  REQUIRE(b.has_value());
  CHECK(b->names() == std::vector<std::string>{"input_ids", "labels"});
  CHECK((*b)["input_ids"].sizes().vec() == std::vector<int64_t>{4, 16});
  CHECK(torch::equal((*b)["input_ids"].slice(1, 1), (*b)["labels"].slice(1, 0, 15)));
  // Shuffled by seed: the same order from a second module; the first window starts with <s>.
  CHECK(data.train_split()->get(0)["input_ids"][0].item<int64_t>() == 1);
  CHECK(data.val_dataloader().size() == 1);
  CHECK(data.test_dataloader().size() == 1);
  CHECK(data.predict_dataloader().size() == 1);
  CHECK(data.hparams()["tokenizer_vocab_size"].as<int64_t>() == 400);
  CHECK(data.hparams()["cache_dir"].as<std::string>() == o.cache_dir);

  // A second module (a later run) reuses both files as they are.
  const auto model_time = mtime(model), tokens_time = mtime(tokens);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  TokenData again(o);
  again.prepare_data();
  again.setup("fit");
  CHECK(mtime(model) == model_time);
  CHECK(mtime(tokens) == tokens_time);
  auto s2 = again.train_dataloader()->iterate();
  CHECK(torch::equal((*s2.next())["input_ids"], (*b)["input_ids"]));

  // setup() without prepare_data() (a rank on another host): makes what is missing itself.
  const std::string dir2 = temp_dir("llm-datamodule-setup-only");
  TokenData fresh(small_options(dir2));
  fresh.setup("validate");
  CHECK(fresh.vocab_size() == 400);
  CHECK(fs::exists(small_options(dir2).tokenizer_path()));
}

TEST_CASE("TokenData: a stale or damaged token file is made again, and other settings get their own",
          "[demos][llm][data]") {
  const std::string dir = temp_dir("llm-stale");
  write_file(dir + "/text/train.txt", small_corpus());
  TokenDataOptions o = small_options(dir);
  o.data_dir = dir + "/text";
  o.train_file = "train.txt";
  o.val_file = "";
  o.test_file = "";
  {
    TokenData d(o);
    d.prepare_data();
  }
  TokenData probe(o);
  probe.setup("fit");
  const std::string tokens = probe.token_file_path("train.txt");
  const std::string model = o.tokenizer_path();
  const int64_t n0 = probe.train_split()->file().num_tokens();
  CHECK(probe.val_dataloader().empty());
  CHECK_THROWS_WITH(probe.test_dataloader(), Catch::Contains("no test_file"));

  // The text changes: its token file follows; the tokenizer is kept.
  const auto model_time = mtime(model);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  write_file(o.data_dir + "/train.txt", small_corpus() + small_corpus());
  {
    TokenData d(o);
    d.prepare_data();
    d.setup("fit");
    CHECK(d.train_split()->file().num_tokens() == 2 * n0);
    CHECK(d.token_file_path("train.txt") == tokens);
  }
  CHECK(mtime(model) == model_time);

  // Truncated by a crash of something else: setup makes it again.
  fs::resize_file(tokens, 100);
  {
    TokenData d(o);
    d.setup("fit");
    CHECK(d.train_split()->file().num_tokens() == 2 * n0);
  }
  // Garbage over it: the same.
  write_file(tokens, "garbage");
  {
    TokenData d(o);
    d.prepare_data();
    d.setup("fit");
    CHECK(d.train_split()->file().num_tokens() == 2 * n0);
  }

  // A header edited where the name's key says what it holds (the vocabulary, <s> and </s>): the
  // same, however its tokenizer and text stamp agree.
  for (const auto& [at, value, width] : {std::tuple<size_t, uint64_t, int>{24, 65535, 8}, {12, 0, 4}}) {
    std::string bytes = file_bytes(tokens);
    put(bytes, at, value, width);
    write_file(tokens, bytes);
    TokenData d(o);
    d.prepare_data();
    d.setup("fit");
    const auto& h = d.train_split()->file().header();
    CHECK(h.vocab_size == d.vocab_size());
    CHECK(h.flags == (TokenFileHeader::kBosPerLine | TokenFileHeader::kEosPerLine));
    CHECK(d.train_split()->file().num_tokens() == 2 * n0);
  }

  // No </s>, or another tokenizer: other token files beside the first.
  TokenDataOptions no_eos = o;
  no_eos.add_eos = false;
  TokenData a(no_eos);
  a.setup("fit");
  CHECK(a.token_file_path("train.txt") != tokens);
  CHECK(a.train_split()->file().header().flags == 1);
  TokenDataOptions other = o;
  other.tokenizer_vocab_size = 380;
  TokenData b(other);
  b.setup("fit");
  CHECK(b.vocab_size() == 380);
  CHECK(b.token_file_path("train.txt") != tokens);
  CHECK(files_in(o.cache_dir).size() == 5);  // 2 tokenizers, 3 token files
  CHECK(fs::exists(tokens));

  // A text of the same name in another folder: a tokenizer and a token file of its own, not the
  // first one's.
  write_file(dir + "/other/train.txt", small_corpus());
  TokenDataOptions elsewhere = o;
  elsewhere.data_dir = dir + "/other";
  CHECK(elsewhere.tokenizer_path() != o.tokenizer_path());
  TokenData e(elsewhere);
  e.setup("fit");
  CHECK(e.token_file_path("train.txt") != tokens);
  CHECK(e.train_split()->file().num_tokens() == n0);
  TokenData first(o);
  first.setup("fit");
  CHECK(first.train_split()->file().num_tokens() == 2 * n0);
}

TEST_CASE("Token files: writers of one file at once leave one whole copy", "[demos][llm][data]") {
  const std::string dir = temp_dir("llm-race");
  Tokenizer tok(small_fixture() + "/tok.model");
  const auto expected = expected_ids(tok, small_fixture() + "/small.txt", true, true);
  std::vector<std::thread> writers;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t)
    writers.emplace_back([&] {
      try {
        for (int i = 0; i < 5; ++i)
          demos::write_token_file(small_fixture() + "/small.txt", tok, true, true, dir + "/same.tok");
      } catch (...) {
        ++failures;
      }
    });
  for (auto& w : writers) w.join();
  CHECK(failures == 0);
  CHECK(all_ids(TokenFile(dir + "/same.tok")) == expected);
  CHECK(files_in(dir) == std::vector<std::string>{"same.tok"});
}

TEST_CASE("TokenData: ready token files, named tokenizers, and what is refused", "[demos][llm][data]") {
  const std::string dir = temp_dir("llm-named");
  Tokenizer tok(small_fixture() + "/tok.model");
  demos::write_token_file(small_fixture() + "/small.txt", tok, true, true, dir + "/ready/train.tok");
  fs::copy_file(dir + "/ready/train.tok", dir + "/ready/val.tok");

  // Token files only: no tokenizer, the vocabulary from their headers.
  TokenDataOptions o = small_options(dir);
  o.data_dir = dir + "/ready";
  o.train_file = "train.tok";
  o.val_file = "val.tok";
  o.test_file = "";
  {
    TokenData d(o);
    d.prepare_data();
    d.setup("fit");
    CHECK(d.tokenizer() == nullptr);
    CHECK(d.vocab_size() == 400);
    CHECK(d.train_split()->file().path() == dir + "/ready/train.tok");
    CHECK_FALSE(fs::exists(o.cache_dir));  // nothing made
    CHECK(o.tokenizer_path().empty());
  }
  // With the tokenizer that wrote them, named: accepted.
  o.tokenizer = small_fixture() + "/tok.model";
  {
    TokenData d(o);
    d.setup("fit");
    CHECK(d.tokenizer()->fingerprint() == tok.fingerprint());
  }
  // With another tokenizer: refused, naming both.
  TokenDataOptions trained = small_options(temp_dir("llm-other-tok"));
  trained.tokenizer_vocab_size = 390;
  TokenData maker(trained);
  maker.prepare_data();
  o.tokenizer = trained.tokenizer_path();
  CHECK_THROWS_WITH(TokenData(o).setup("fit"), Catch::Contains("was written by another tokenizer"));

  // A named tokenizer that does not exist.
  TokenDataOptions missing = small_options(dir);
  missing.tokenizer = dir + "/nope.model";
  CHECK_THROWS_WITH(TokenData(missing).prepare_data(), Catch::Contains("nope.model' (data.tokenizer) does not exist"));
  // A missing text file.
  TokenDataOptions no_text = small_options(dir);
  no_text.train_file = "absent.txt";
  CHECK_THROWS_WITH(TokenData(no_text).setup("fit"), Catch::Contains("absent.txt' does not exist"));
  // prepare_data finds a missing val_file (or a folder in its place) before it trains a tokenizer.
  TokenDataOptions no_val = small_options(temp_dir("llm-no-val"));
  no_val.val_file = "absent.txt";
  CHECK_THROWS_WITH(TokenData(no_val).prepare_data(),
                    Catch::Contains("data.val_file: '") && Catch::Contains("absent.txt' does not exist"));
  CHECK_FALSE(fs::exists(no_val.tokenizer_path()));
  no_val.val_file = "";
  no_val.test_file = "..";
  CHECK_THROWS_WITH(TokenData(no_val).prepare_data(),
                    Catch::Contains("data.test_file: '") && Catch::Contains("' is not a regular file"));
  CHECK_FALSE(fs::exists(no_val.tokenizer_path()));
  // Windows larger than the text.
  TokenDataOptions too_long = small_options(dir);
  too_long.block_size = 100000;
  CHECK_THROWS_WITH(TokenData(too_long).setup("fit"), Catch::Contains("fewer than one window"));
}

TEST_CASE("TokenDataOptions: bad values are ConfigErrors naming the key", "[demos][llm][data]") {
  auto bad = [](auto edit, const std::string& key) {
    TokenDataOptions o;
    edit(o);
    INFO(key);
    CHECK_THROWS_WITH(o.validate("data"), Catch::Contains("'data." + key + "'"));
    CHECK_THROWS_AS(TokenData(o), ConfigError);
  };
  bad([](TokenDataOptions& o) { o.block_size = 0; }, "block_size");
  bad([](TokenDataOptions& o) { o.batch_size = 0; }, "batch_size");
  bad([](TokenDataOptions& o) { o.num_workers = -1; }, "num_workers");
  bad([](TokenDataOptions& o) { o.train_file = ""; }, "train_file");
  bad([](TokenDataOptions& o) { o.cache_dir = ""; }, "cache_dir");
  bad([](TokenDataOptions& o) { o.tokenizer_vocab_size = 100; }, "tokenizer_vocab_size");
  bad([](TokenDataOptions& o) { o.tokenizer_vocab_size = int64_t{1} << 33; }, "tokenizer_vocab_size");
  // A token file to train on and text to tokenize, with no tokenizer to do it.
  bad(
      [](TokenDataOptions& o) {
        o.train_file = "train.tok";
        o.val_file = "val.tok";
      },
      "test_file");
  TokenDataOptions ok;
  ok.train_file = "train.tok";
  ok.val_file = "val.tok";
  ok.test_file = "";
  CHECK_NOTHROW(ok.validate("data"));
  ok.test_file = "test.txt";
  ok.tokenizer = "m.model";
  CHECK_NOTHROW(ok.validate("data"));
  CHECK(ok.tokenizer_path() == "m.model");
}

TEST_CASE("TokenData: a Trainer fits on it (prepare_data, setup, named batches)", "[demos][llm][data]") {
  const std::string dir = temp_dir("llm-fit");
  TokenData data(small_options(dir));
  TinyLM model(400, 16);
  auto opts = quiet_options(dir + "/run");
  opts.max_steps = 3;
  opts.limit_val_batches = volt::BatchLimit::count(2);
  Trainer trainer(opts);
  trainer.fit(model, data);
  CHECK(trainer.global_step() == 3);
  REQUIRE(model.shapes.size() == 3);
  CHECK(model.shapes[0] == std::vector<int64_t>{4, 16});
}

TEST_CASE("Token files: the Python reference reads volt's and volt reads Python's", "[demos][llm][data][python]") {
  if (!python_sentencepiece()) return;
  const std::string dir = temp_dir("llm-py-format");
  const std::string text = small_fixture() + "/small.txt", model = small_fixture() + "/tok.model";
  Tokenizer tok(model);
  demos::write_token_file(text, tok, true, true, dir + "/cpp.tok");
  TokenWindows w(std::make_shared<const TokenFile>(dir + "/cpp.tok"), 16);

  std::string out;
  REQUIRE(run_token_file_py({"read", dir + "/cpp.tok", "--block-size", "16", "--windows", "0,3,-1"}, out) == 0);
  INFO(out);
  const YAML::Node r = YAML::Load(out.substr(out.rfind("\n{") + 1));  // the JSON line (after any log lines)
  CHECK(r["header"]["num_tokens"].as<int64_t>() == w.file().num_tokens());
  CHECK(r["header"]["vocab_size"].as<int64_t>() == 400);
  CHECK(r["header"]["flags"].as<int64_t>() == 3);
  CHECK(r["header"]["tokenizer"].as<std::string>() == volt::detail::hex64(tok.fingerprint()));
  CHECK(r["num_windows"].as<int64_t>() == w.size());
  for (int64_t i : {int64_t{0}, int64_t{3}, w.size() - 1}) {
    INFO("window " << i);
    const auto win = r["windows"][std::to_string(i)];
    CHECK(win["input_ids"].as<std::vector<int64_t>>() == to_vec(w.get(i)["input_ids"]));
    CHECK(win["labels"].as<std::vector<int64_t>>() == to_vec(w.get(i)["labels"]));
  }

  // Python tokenizes (its own line reading, its own encoder) and writes; volt reads the same ids.
  for (const bool eos : {true, false}) {
    std::vector<std::string> args = {"write", text, "--model", model, "--out", dir + "/py.tok"};
    if (!eos) args.push_back("--no-eos");
    REQUIRE(run_token_file_py(args, out) == 0);
    TokenFile py(dir + "/py.tok");
    CHECK(py.header().tokenizer == 0);
    CHECK(py.header().flags == (eos ? 3u : 1u));
    CHECK(all_ids(py) == expected_ids(tok, text, true, eos));
  }
}

TEST_CASE("TokenData: WikiText-2 valid.txt with the default 8000-piece tokenizer, as Python tokenizes it",
          "[demos][llm][data][python]") {
  if (!fs::exists(kWikiText + "/valid.txt")) {
    WARN("WikiText-2 not found in " << kWikiText << ": skipped");
    return;
  }
  const std::string dir = temp_dir("llm-wikitext");
  TokenDataOptions o;
  o.data_dir = kWikiText;
  o.cache_dir = dir;
  o.val_file = "";
  o.test_file = "";
  TokenData data(o);
  data.prepare_data();
  data.setup("fit");
  CHECK(data.vocab_size() == 8000);
  const TokenFile& f = data.train_split()->file();
  // About 300k tokens (<s> and </s> around each of its 2461 lines included); uint16 ids.
  CHECK(f.header().token_bytes == 2);
  CHECK(f.num_tokens() > 200000);
  CHECK(f.num_tokens() < 350000);
  // The first line, back from its tokens.
  std::string first;
  demos::for_each_text_line(kWikiText + "/valid.txt", [&](const std::string& line, int64_t) {
    if (first.empty()) first = line;
  });
  const auto head = to_vec(f.read(0, 64));
  const auto end = std::find(head.begin(), head.end(), int64_t{2});
  REQUIRE(end != head.end());
  CHECK(head.front() == 1);
  CHECK(data.tokenizer()->decode({head.begin(), end}) == first);

  if (!python_sentencepiece()) return;
  std::string out;
  REQUIRE(run_token_file_py(
              {"write", kWikiText + "/valid.txt", "--model", o.tokenizer_path(), "--out", dir + "/py.tok"}, out) == 0);
  TokenFile py(dir + "/py.tok");
  REQUIRE(py.num_tokens() == f.num_tokens());
  CHECK(torch::equal(py.read(0, py.num_tokens()), f.read(0, f.num_tokens())));
}

TEST_CASE("TokenData with LlamaLM: a fit stopped mid-epoch resumes on the same batches, bit for bit",
          "[demos][llm][data][resume]") {
  const std::string dir = temp_dir("llm-resume");
  demos::LlamaLMOptions m;
  m.vocab_size = 400;
  m.hidden_size = 16;
  m.num_hidden_layers = 1;
  m.num_attention_heads = 2;
  m.intermediate_size = 32;
  m.max_position_embeddings = 16;
  m.tie_word_embeddings = true;
  m.warmup_steps = 2;
  m.lr_decay_steps = 7;  // not the Trainer's max_steps, which differs between the runs
  auto fit = [&](const std::string& run, int64_t steps, const std::string& ckpt) {
    torch::manual_seed(3);
    demos::LlamaLM model(m);
    TokenData data(small_options(dir));  // shuffled windows (seed 42), one cache for all runs
    auto opts = quiet_options(dir + "/" + run);
    opts.max_steps = steps;
    opts.limit_val_batches = volt::BatchLimit::count(0);
    Trainer trainer(opts);
    trainer.fit(model, data, ckpt);
    if (ckpt.empty() && steps == 3) trainer.save_checkpoint(dir + "/mid.ckpt");
    std::map<std::string, torch::Tensor> state;
    for (const auto& kv : model.named_parameters()) state[kv.key()] = kv.value().detach().clone();
    return state;
  };
  const auto whole = fit("whole", 7, "");
  fit("first", 3, "");
  const auto resumed = fit("second", 7, dir + "/mid.ckpt");
  REQUIRE(whole.size() == resumed.size());
  for (const auto& [name, t] : whole) {
    INFO(name);
    CHECK(torch::equal(t, resumed.at(name)));
  }
}
