// safetensors files: every dtype round-trips, the layout is the reference implementation's, and
// every kind of damage is a CheckpointError naming the file and the problem.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "boring_model.h"
#include "checkpoint/checkpoint_support.h"
#include "volt/checkpoint/safetensors.h"
#include "volt/core/errors.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

/// One tensor of each dtype the format holds, plus a scalar, an empty and a non-contiguous one.
std::map<std::string, torch::Tensor> every_dtype() {
  auto gen = at::detail::createCPUGenerator(11);
  std::map<std::string, torch::Tensor> t;
  t["f64"] = torch::randn({2, 3}, gen).to(torch::kDouble);
  t["f32"] = torch::randn({3, 4}, gen);
  t["f16"] = torch::randn({5}, gen).to(torch::kHalf);
  t["bf16"] = torch::randn({2, 2, 2}, gen).to(torch::kBFloat16);
  t["i64"] = torch::arange(-4, 5, torch::kLong) * int64_t{1000000007};
  t["i32"] = torch::arange(-3, 4, torch::kInt) * 70000;
  t["i16"] = torch::arange(-3, 3, torch::kShort) * 1000;
  t["i8"] = torch::arange(-128, 128, 37, torch::kChar);
  t["u8"] = torch::arange(0, 256, 51, torch::kByte);
  t["bool"] = torch::tensor({true, false, false, true, true});
  t["scalar"] = torch::tensor(-2.5);
  t["empty"] = torch::zeros({0, 3});
  t["transposed"] = torch::randn({3, 5}, gen).t();  // not contiguous
  return t;
}

/// A file of 8-byte length, `header` as given (no padding) and `data`.
std::string craft(const std::string& dir, const std::string& name, const std::string& header, const std::string& data) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  bytes += header + data;
  const std::string path = dir + "/" + name + ".safetensors";
  write_bytes(path, bytes.data(), bytes.size());
  return path;
}

std::string open_error(const std::string& path) {
  return checkpoint_error([&] { SafetensorsReader r(path); });
}

std::vector<std::string> folder_entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("safetensors round trip of every dtype, with metadata, a scalar, an empty and a non-contiguous tensor",
          "[weights][safetensors]") {
  const std::string dir = temp_dir("st-roundtrip");
  const std::string path = dir + "/all.safetensors";
  const auto tensors = every_dtype();
  const uint64_t size = save_safetensors(tensors, path, {{"format", "pt"}, {"note", "ünïcode ✓"}});
  CHECK(size == fs::file_size(path));

  SafetensorsReader r(path);
  CHECK(r.metadata() == std::map<std::string, std::string>{{"format", "pt"}, {"note", "ünïcode ✓"}});
  std::vector<std::string> names;
  for (const auto& kv : tensors) names.push_back(kv.first);
  CHECK(r.names() == names);
  CHECK(r.entry("bf16").dtype == at::kBFloat16);
  CHECK(r.entry("scalar").shape.empty());
  CHECK(r.entry("empty").numel == 0);
  check_same_tensors(tensors, r.read_all());
  check_same_tensors(tensors, load_safetensors(path));
  CHECK(r.read("transposed").is_contiguous());
  CHECK_THAT(checkpoint_error([&] { r.read("nope"); }), Contains("nope") && Contains(path));

  // An empty file of tensors is valid too.
  save_safetensors({}, dir + "/none.safetensors");
  CHECK(SafetensorsReader(dir + "/none.safetensors").names().empty());
}

TEST_CASE(
    "the safetensors writer lays the file out as the reference implementation: padded header, sorted keys, "
    "aligned data",
    "[weights][safetensors]") {
  const std::string dir = temp_dir("st-layout");
  const std::string path = dir + "/all.safetensors";
  const auto tensors = every_dtype();
  save_safetensors(tensors, path, {{"format", "pt"}});
  const auto bytes = read_bytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  CHECK(n % 8 == 0);
  const std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  CHECK(header.front() == '{');
  const size_t close = header.find_last_of('}');
  CHECK(header.find_first_not_of(' ', close + 1) == std::string::npos);  // padded with spaces only
  // Keys sorted, __metadata__ among them.
  size_t last = 0;
  for (const auto& [name, t] : tensors) {
    const size_t at = header.find("\"" + name + "\":");
    REQUIRE(at != std::string::npos);
    CHECK(at > last);
    last = at;
  }
  // Data: larger items first, each tensor aligned to its item size.
  SafetensorsReader r(path);
  CHECK(r.data_start() == 8 + n);
  size_t prev_item = 8;
  std::vector<std::pair<uint64_t, std::string>> by_offset;
  for (const auto& name : r.names()) by_offset.emplace_back(r.entry(name).begin, name);
  std::sort(by_offset.begin(), by_offset.end());
  for (const auto& [begin, name] : by_offset) {
    INFO(name);
    const size_t item = c10::elementSize(r.entry(name).dtype);
    CHECK(begin % item == 0);
    CHECK(item <= prev_item);
    prev_item = item;
  }
}

TEST_CASE("damaged safetensors files are CheckpointErrors naming the file and the problem", "[weights][safetensors]") {
  const std::string dir = temp_dir("st-damaged");
  const std::string good = dir + "/good.safetensors";
  save_safetensors({{"a", torch::arange(6, torch::kFloat).reshape({2, 3})}, {"b", torch::arange(4, torch::kShort)}},
                   good);
  const auto bytes = read_bytes(good);
  const std::string f32 = std::string(24, '\x01');

  SECTION("a file shorter than the header length") {
    const std::string p = dir + "/short.safetensors";
    write_bytes(p, bytes.data(), 5);
    const std::string msg = open_error(p);
    CHECK_THAT(msg, Contains(p) && Contains("truncated") && Contains("5 bytes"));
  }
  SECTION("a file cut inside its header: the header length is larger than the file") {
    const std::string p = dir + "/cut-header.safetensors";
    write_bytes(p, bytes.data(), 40);
    CHECK_THAT(open_error(p), Contains(p) && Contains("header length") && Contains("larger than the file"));
  }
  SECTION("a file cut inside its data, at every length") {
    SafetensorsReader r(good);
    for (size_t cut = r.data_start(); cut < bytes.size(); cut += 3) {
      INFO(cut);
      const std::string p = dir + "/cut-data.safetensors";
      write_bytes(p, bytes.data(), cut);
      CHECK_THAT(open_error(p), Contains(p) && Contains("out of range") && Contains("truncated"));
    }
  }
  SECTION("an absurd header length") {
    const std::string p = craft(dir, "huge", "", "");
    std::vector<char> b(16, '\xff');
    write_bytes(p, b.data(), b.size());
    CHECK_THAT(open_error(p), Contains(p) && Contains("larger than the file"));
  }
  SECTION("malformed JSON") {
    const std::string p =
        craft(dir, "json", R"({"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]})", f32);
    CHECK_THAT(open_error(p), Contains(p) && Contains("not valid JSON"));
  }
  SECTION("a header that is not an object") {
    CHECK_THAT(open_error(craft(dir, "list", "[1, 2]", "")), Contains("does not start with '{'"));
  }
  SECTION("an unknown dtype") {
    const std::string p =
        craft(dir, "dtype", R"({"a": {"dtype": "F33", "shape": [2, 3], "data_offsets": [0, 24]}})", f32);
    CHECK_THAT(open_error(p), Contains(p) && Contains("tensor 'a'") && Contains("unknown dtype 'F33'"));
  }
  SECTION("a dtype of the format that LibTorch 1.13 lacks") {
    const std::string p =
        craft(dir, "u16", R"({"a": {"dtype": "U16", "shape": [2], "data_offsets": [0, 4]}})", std::string(4, '\0'));
    CHECK_THAT(open_error(p), Contains("tensor 'a'") && Contains("U16") && Contains("no type"));
  }
  SECTION("offsets out of range") {
    const std::string p =
        craft(dir, "range", R"({"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [8, 32]}})", f32);
    CHECK_THAT(open_error(p), Contains(p) && Contains("tensor 'a'") && Contains("out of range"));
  }
  SECTION("offsets that do not match shape * itemsize") {
    const std::string p =
        craft(dir, "size", R"({"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 24]}})", f32);
    CHECK_THAT(open_error(p), Contains("tensor 'a'") && Contains("[2, 2]") && Contains("needs 16 bytes"));
  }
  SECTION("overlapping tensors") {
    const std::string p = craft(dir, "overlap",
                                R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                                    "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
                                f32);
    CHECK_THAT(open_error(p), Contains(p) && Contains("'b'") && Contains("overlaps tensor 'a'"));
  }
  SECTION("a gap between tensors") {
    const std::string p = craft(dir, "gap",
                                R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                    "b": {"dtype": "F32", "shape": [2], "data_offsets": [16, 24]}})",
                                f32);
    CHECK_THAT(open_error(p), Contains("[8, 16)") && Contains("before tensor 'b'") && Contains("contiguously"));
  }
  SECTION("bytes after the last tensor") {
    const std::string p = craft(dir, "tail", R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", f32);
    CHECK_THAT(open_error(p), Contains("[16, 24)") && Contains("after the last tensor"));
  }
  SECTION("a negative dimension, a missing field, a name given twice, metadata that is not text") {
    CHECK_THAT(open_error(craft(dir, "neg", R"({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})",
                                std::string(8, '\0'))),
               Contains("tensor 'a'") && Contains("-2"));
    CHECK_THAT(open_error(craft(dir, "field", R"({"a": {"dtype": "F32", "shape": [2]}})", std::string(8, '\0'))),
               Contains("tensor 'a'") && Contains("data_offsets"));
    CHECK_THAT(open_error(craft(dir, "twice",
                                R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                    "a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
                                std::string(16, '\0'))),
               Contains("'a' twice"));
    CHECK_THAT(open_error(craft(dir, "meta", R"({"__metadata__": {"epoch": 3}})", "")),
               Contains("__metadata__") && Contains("epoch"));
  }
  SECTION("a BOOL tensor holding other bytes") {
    const std::string p = craft(dir, "bool", R"({"m": {"dtype": "BOOL", "shape": [3], "data_offsets": [0, 3]}})",
                                std::string("\1\7\0", 3));
    SafetensorsReader r(p);
    CHECK_THAT(checkpoint_error([&] { r.read("m"); }), Contains(p) && Contains("'m'") && Contains("0 and 1"));
  }
  SECTION("a missing file") {
    CHECK_THAT(open_error(dir + "/absent.safetensors"), Contains(dir + "/absent.safetensors"));
  }
}

TEST_CASE("a failed safetensors write leaves the previous file intact and no temporary file",
          "[weights][safetensors]") {
  const std::string dir = temp_dir("st-atomic");
  const std::string path = dir + "/w.safetensors";
  const std::map<std::string, torch::Tensor> first{{"w", torch::ones({3})}};
  save_safetensors(first, path);
  const auto before = read_bytes(path);

  // A dtype the format cannot hold: refused naming the tensor, nothing written.
  CHECK_THAT(checkpoint_error([&] {
               save_safetensors({{"w", torch::zeros({3})}, {"z", torch::zeros({2}, torch::kComplexFloat)}}, path);
             }),
             Contains("'z'") && Contains("ComplexFloat"));
  CHECK(read_bytes(path) == before);
  CHECK(folder_entries(dir) == std::vector<std::string>{"w.safetensors"});

  // The streaming writer: undeclared, mis-shaped or unwritten tensors are refused, and an
  // abandoned writer leaves nothing.
  {
    SafetensorsWriter w(path, {{"a", {at::kFloat, {2, 2}}}, {"b", {at::kLong, {3}}}});
    CHECK_THAT(checkpoint_error([&] { w.add("c", torch::zeros({1})); }), Contains("'c'") && Contains("not declared"));
    CHECK_THAT(checkpoint_error([&] { w.add("a", torch::zeros({4})); }), Contains("'a'") && Contains("[2, 2]"));
    CHECK_THAT(checkpoint_error([&] { w.add("b", torch::zeros({3})); }), Contains("'b'") && Contains("Long"));
    w.add("b", torch::arange(3, torch::kLong));
    CHECK_THAT(checkpoint_error([&] { w.add("b", torch::arange(3, torch::kLong)); }), Contains("twice"));
    CHECK_THAT(checkpoint_error([&] { w.commit(); }), Contains("'a'") && Contains("never written"));
    CHECK(folder_entries(dir).size() == 2);  // the temporary file, while the writer lives
  }
  CHECK(read_bytes(path) == before);
  CHECK(folder_entries(dir) == std::vector<std::string>{"w.safetensors"});

  // Tensors may come in any order; the file is whole once committed.
  {
    SafetensorsWriter w(path, {{"a", {at::kFloat, {2, 2}}}, {"b", {at::kLong, {3}}}}, {{"k", "v"}});
    w.add("b", torch::arange(3, torch::kLong));
    w.add("a", torch::eye(2));
    w.commit();
  }
  check_same_tensors(load_safetensors(path), {{"a", torch::eye(2)}, {"b", torch::arange(3, torch::kLong)}});

  // A path under a file cannot be written: the error names it.
  write_bytes(dir + "/plain", "x", 1);
  CHECK_THAT(checkpoint_error([&] { save_safetensors(first, dir + "/plain/w.safetensors"); }),
             Contains(dir + "/plain/w.safetensors"));
}
