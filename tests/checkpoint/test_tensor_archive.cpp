// The checkpoint file format underneath every checkpoint (checkpoint/tensor_archive.h): xxh64, the
// streaming writer and the verifying reader; the sharded folder format read through
// CheckpointReader (checkpoint/checkpoint_reader.h, sharded_checkpoint.h); consolidation.
#include <torch/torch.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "boring_model.h"
#include "checkpoint/checkpoint_support.h"
#include "volt/checkpoint/checkpoint.h"
#include "volt/checkpoint/checkpoint_reader.h"
#include "volt/checkpoint/sharded_checkpoint.h"
#include "volt/checkpoint/tensor_archive.h"
#include "volt/core/errors.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

std::vector<std::string> folder_entries(const std::string& dir) {
  std::vector<std::string> out;
  for (auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  return out;
}

/// The tensors of every dtype and layout the archive must carry.
std::map<std::string, torch::Tensor> assorted_tensors() {
  auto gen = at::detail::createCPUGenerator(11);
  std::map<std::string, torch::Tensor> t;
  t["float"] = torch::randn({4, 3}, gen);
  t["double"] = torch::randn({2, 5}, gen).to(torch::kDouble);
  t["bf16"] = torch::randn({7}, gen).to(torch::kBFloat16);
  t["int64"] = torch::arange(-5, 7, torch::kLong).reshape({3, 4}) * int64_t{1000000007};
  t["bool"] = torch::tensor({true, false, false, true, true});
  t["scalar"] = torch::tensor(2.5);
  t["empty"] = torch::zeros({0, 4});
  t["transposed"] = torch::randn({3, 6}, gen).t();  // not contiguous
  return t;
}

/// 3M floats (12 MB): three 4 MiB checksum chunks, the last one partial.
torch::Tensor big_tensor() { return torch::arange(3000000, torch::kFloat); }
constexpr int64_t kFloatsPerChunk = kChecksumChunkBytes / 4;

/// Writes the assorted tensors and the big one as section "s" of an archive at `path`.
void write_archive(const std::string& path) {
  ArchiveWriter w(path);
  for (const auto& [name, t] : assorted_tensors()) w.add("s", name, t);
  w.add("s", "big", big_tensor());
  w.add("other", "x", torch::ones({2}));
  YAML::Node meta(YAML::NodeType::Map);
  meta["hello"] = "world";
  meta["n"] = 7;
  w.commit({{"answer", int64_t{42}}}, meta);
}

Checkpoint small_checkpoint() {
  Checkpoint c;
  c.epoch = 2;
  c.global_step = 17;
  auto gen = at::detail::createCPUGenerator(3);
  c.state_dict["layer.weight"] = torch::randn({5, 4}, gen);
  c.state_dict["layer.bias"] = torch::randn({5}, gen);
  c.state_dict["steps"] = torch::arange(6, torch::kLong);
  c.optimizer_state["layer.weight.exp_avg"] = torch::randn({5, 4}, gen);
  c.optimizer_state["layer.weight.step"] = torch::tensor(4, torch::kLong);
  c.rng_states["rank0.cpu"] = torch::arange(30, torch::kByte);
  c.meta["hyper_parameters"]["lr"] = 0.5;
  return c;
}

/// A sharded checkpoint of `c` at `dir` written in-process by a world of one: every tensor is one
/// piece on rank 0, stored flattened.
void write_sharded(const Checkpoint& c, const std::string& dir) {
  ShardedCheckpointWriter w(dir, 0, 1, [](const std::string& e, const std::string&) {
    if (!e.empty()) throw CheckpointError(e);
  });
  auto put = [&](const char* section, const std::map<std::string, torch::Tensor>& tensors) {
    for (const auto& [name, t] : tensors) {
      w.file().add(section, name, t.reshape({-1}));
      w.declare(section, name, t.scalar_type(), t.sizes().vec(), 0, 0, t.numel());
    }
  };
  put(kModelSection, c.state_dict);
  put(kOptimizerSection, c.optimizer_state);
  put(kRngSection, c.rng_states);
  w.commit(c);
}

}  // namespace

TEST_CASE("xxh64 matches the reference xxHash on known vectors", "[checkpoint][xxh64]") {
  CHECK(volt::detail::xxh64("", 0) == 0xEF46DB3751D8E999ULL);
  CHECK(volt::detail::xxh64("a", 1) == 0xD24EC4F1A98C6E5BULL);
  CHECK(volt::detail::xxh64("abc", 3) == 0x44BC2CF5AD770999ULL);
  const std::string spam = "Nobody inspects the spammish repetition";  // 39 bytes
  CHECK(volt::detail::xxh64(spam.data(), spam.size()) == 0xFBCEA83C8A378BF1ULL);

  // Every path through the function (the 32-byte stripes, 8-, 4- and 1-byte tails), from
  // libxxhash 0.8.1's XXH64 of bytes (i * 31 + 7) % 251.
  std::vector<unsigned char> data(size_t{1} << 20);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>((i * 31 + 7) % 251);
  const std::vector<std::pair<size_t, uint64_t>> expected = {{4, 0xC60D15B1E3FF8F04ULL},
                                                             {8, 0x3DA5C7AA269683E0ULL},
                                                             {15, 0xDEE89D8A065A6233ULL},
                                                             {31, 0x3391303D485E846EULL},
                                                             {32, 0x40B7AFF75D45BBC8ULL},
                                                             {47, 0xBE144774A53030C0ULL},
                                                             {63, 0x2944B4DAFC69B206ULL},
                                                             {64, 0xBB76F6EF19BD5A1BULL},
                                                             {100, 0xF0B29A915621716DULL},
                                                             {1000, 0x9E3300C1CDE3C58DULL},
                                                             {size_t{1} << 20, 0x9D70CECFF6AD57CDULL}};
  for (const auto& [n, h] : expected) {
    INFO(n << " bytes");
    CHECK(volt::detail::xxh64(data.data(), n) == h);
  }
  CHECK(volt::detail::xxh64(data.data(), 100, 12345) == 0xAABE5AE21D9730C6ULL);
  // Unaligned input gives the same as aligned.
  std::vector<unsigned char> shifted(101);
  std::copy(data.begin(), data.begin() + 100, shifted.begin() + 1);
  CHECK(volt::detail::xxh64(shifted.data() + 1, 100) == 0xF0B29A915621716DULL);
}

TEST_CASE("ArchiveWriter and ArchiveReader round-trip every dtype and layout", "[checkpoint][archive]") {
  const std::string dir = temp_dir("archive-roundtrip");
  const std::string path = dir + "/a.ckpt";
  write_archive(path);
  CHECK(folder_entries(dir) == std::vector<std::string>{"a.ckpt"});

  ArchiveReader r(path);
  CHECK(r.path() == path);
  CHECK(r.meta()["hello"].as<std::string>() == "world");
  CHECK(r.meta()["n"].as<int>() == 7);
  REQUIRE(r.index().count("s"));
  CHECK(r.index().at("s").size() == assorted_tensors().size() + 1);
  for (const auto& [name, t] : assorted_tensors()) {
    INFO(name);
    const ArchiveTensor* a = r.find("s", name);
    REQUIRE(a != nullptr);
    CHECK(a->dtype == t.scalar_type());
    CHECK(a->shape == t.sizes().vec());
    CHECK(a->numel == t.numel());
    const torch::Tensor back = r.read("s", name);
    CHECK(back.scalar_type() == t.scalar_type());
    CHECK(back.sizes() == t.sizes());
    CHECK(torch::equal(back, t));
    // A flat range is the same slice of the flattened tensor.
    if (t.numel() >= 3) CHECK(torch::equal(r.read_flat("s", name, 1, 2), t.reshape({-1}).narrow(0, 1, 2)));
    CHECK(r.read_flat("s", name, 0, 0).numel() == 0);
  }
  CHECK(torch::equal(r.read("other", "x"), torch::ones({2})));
  CHECK(r.read("s", "scalar").dim() == 0);
  CHECK(r.find("s", "nope") == nullptr);
  CHECK(r.find("nope", "float") == nullptr);
  CHECK_THAT(checkpoint_error([&] { r.read("s", "nope"); }), Contains("nope"));

  // The index holds one xxh64 per 4 MiB chunk of the data.
  const ArchiveTensor* big = r.find("s", "big");
  REQUIRE(big != nullptr);
  REQUIRE(big->chunk_sums.size() == 3);
  const torch::Tensor original = big_tensor();
  const auto* bytes = static_cast<const unsigned char*>(original.data_ptr());
  CHECK(big->chunk_sums[0] == volt::detail::xxh64(bytes, kChecksumChunkBytes));
  CHECK(big->chunk_sums[2] == volt::detail::xxh64(bytes + 2 * kChecksumChunkBytes, 12000000 - 2 * kChecksumChunkBytes));
  CHECK(big->chunk_sums[0] != big->chunk_sums[1]);
}

TEST_CASE("ArchiveReader::read_flat across 4 MiB checksum chunks equals the slice", "[checkpoint][archive]") {
  const std::string path = temp_dir("archive-flat") + "/a.ckpt";
  write_archive(path);
  ArchiveReader r(path);
  const torch::Tensor flat = big_tensor();
  CHECK(torch::equal(r.read("s", "big"), flat));
  const std::vector<std::pair<int64_t, int64_t>> ranges = {
      {0, 1},                                                          // first element
      {kFloatsPerChunk - 10, 20},                                      // across the first boundary
      {kFloatsPerChunk, 5},                                            // starts on a boundary
      {kFloatsPerChunk - 1, 1},                                        // last element of a chunk
      {1000000, 1200000},                                              // spans all three chunks
      {2 * kFloatsPerChunk - 3, 3000000 - (2 * kFloatsPerChunk - 3)},  // to the end
      {2999999, 1},                                                    // last element
      {0, 3000000}};                                                   // everything
  for (const auto& [start, length] : ranges) {
    INFO("elements [" << start << ", " << start + length << ")");
    const torch::Tensor got = r.read_flat("s", "big", start, length);
    CHECK(got.dim() == 1);
    CHECK(got.numel() == length);
    CHECK(torch::equal(got, flat.narrow(0, start, length)));
  }
  // Out of range.
  CHECK_THAT(checkpoint_error([&] { r.read_flat("s", "big", 2999999, 2); }), Contains(path));
  CHECK_THAT(checkpoint_error([&] { r.read_flat("s", "big", -1, 2); }), Contains("big"));
  CHECK_THAT(checkpoint_error([&] { r.read_flat("s", "big", 3000001, 0); }), Contains("out of range"));
  CHECK_THAT(checkpoint_error([&] { r.read_flat("s", "float", 0, 13); }), Contains("out of range"));
  CHECK_THAT(checkpoint_error([&] { r.read_flat("s", "float", 5, -1); }), Contains("out of range"));
}

TEST_CASE("ArchiveWriter: nothing at the path before commit, and an uncommitted writer leaves no trace",
          "[checkpoint][archive]") {
  const std::string dir = temp_dir("archive-commit");
  const std::string path = dir + "/a.ckpt";
  SECTION("nothing appears before commit()") {
    ArchiveWriter w(path);
    w.add("s", "x", torch::ones({1000}));
    CHECK_FALSE(fs::exists(path));
    CHECK(w.bytes_written() >= 4000);
    w.commit({}, YAML::Node(YAML::NodeType::Map));
    CHECK(fs::exists(path));
    CHECK(folder_entries(dir) == std::vector<std::string>{"a.ckpt"});
    CHECK(torch::equal(ArchiveReader(path).read("s", "x"), torch::ones({1000})));
  }
  SECTION("a writer destroyed without commit() leaves no file and no temporary") {
    {
      ArchiveWriter w(path);
      w.add("s", "x", torch::ones({1000}));
      w.add("s", "big", big_tensor());
      CHECK_FALSE(folder_entries(dir).empty());  // its temporary, while it writes
    }
    CHECK(folder_entries(dir).empty());
  }
  SECTION("an existing file survives an uncommitted writer") {
    {
      ArchiveWriter w(path);
      w.add("s", "x", torch::full({3}, 5.0));
      w.commit({}, YAML::Node(YAML::NodeType::Map));
    }
    const auto before = read_bytes(path);
    {
      ArchiveWriter w(path);
      w.add("s", "x", torch::zeros({3}));
      w.add("s", "y", torch::zeros({100000}));
    }
    CHECK(read_bytes(path) == before);
    CHECK(folder_entries(dir) == std::vector<std::string>{"a.ckpt"});
    CHECK(torch::equal(ArchiveReader(path).read("s", "x"), torch::full({3}, 5.0)));
  }
  SECTION("misuse is a CheckpointError") {
    ArchiveWriter w(path);
    w.add("s", "x", torch::ones({2}));
    CHECK_THAT(checkpoint_error([&] { w.add("s", "x", torch::ones({2})); }), Contains("twice"));
    CHECK_THAT(checkpoint_error([&] { w.add("s", "u", torch::Tensor()); }), Contains("undefined"));
    w.add("t", "x", torch::ones({2}));  // the same name in another section is fine
    w.commit({}, YAML::Node(YAML::NodeType::Map));
    CHECK_THROWS_AS(w.add("s", "z", torch::ones({2})), CheckpointError);
    CHECK_THROWS_AS(w.commit({}, YAML::Node(YAML::NodeType::Map)), CheckpointError);
  }
}

TEST_CASE("a flipped byte fails the reads of its checksum chunk only", "[checkpoint][archive]") {
  const std::string path = temp_dir("archive-flip") + "/a.ckpt";
  write_archive(path);
  uint64_t data_offset = 0;
  {
    ArchiveReader r(path);
    data_offset = r.find("s", "big")->offset;
  }
  // Flip a byte of element 1.5 chunks in: the middle of the second chunk.
  const int64_t element = kFloatsPerChunk + kFloatsPerChunk / 2;
  auto bytes = read_bytes(path);
  const size_t at = static_cast<size_t>(data_offset + static_cast<uint64_t>(element) * 4 + 1);
  REQUIRE(at < bytes.size());
  // The offset really is the tensor's data: the element's bytes are there.
  float there = 0;
  std::memcpy(&there, bytes.data() + at - 1, 4);
  REQUIRE(there == static_cast<float>(element));
  bytes[at] ^= 0x04;
  write_bytes(path, bytes.data(), bytes.size());

  ArchiveReader r(path);  // the structure is intact: opening does not read the data
  const torch::Tensor flat = big_tensor();
  auto msg = checkpoint_error([&] { r.read("s", "big"); });
  CHECK_THAT(msg, Contains("checksum"));
  CHECK_THAT(msg, Contains(path));
  CHECK_THAT(msg, Contains("big"));
  // Ranges in the other chunks still read, verified.
  CHECK(torch::equal(r.read_flat("s", "big", 0, 1000), flat.narrow(0, 0, 1000)));
  CHECK(torch::equal(r.read_flat("s", "big", 2 * kFloatsPerChunk + 10, 1000),
                     flat.narrow(0, 2 * kFloatsPerChunk + 10, 1000)));
  // A range holding the byte, or only reaching into its chunk, does not.
  CHECK_THAT(checkpoint_error([&] { r.read_flat("s", "big", element - 2, 4); }), Contains("checksum"));
  CHECK_THAT(checkpoint_error([&] { r.read_flat("s", "big", kFloatsPerChunk - 5, 10); }), Contains("checksum"));
  // The other tensors are unaffected.
  for (const auto& [name, t] : assorted_tensors()) {
    INFO(name);
    CHECK(torch::equal(r.read("s", name), t));
  }
}

TEST_CASE("truncated archives and checkpoints are CheckpointErrors naming the file, at any length",
          "[checkpoint][archive]") {
  const std::string dir = temp_dir("archive-cut");
  const std::string full = dir + "/full.ckpt";
  save_checkpoint_file(small_checkpoint(), full);
  const auto bytes = read_bytes(full);
  REQUIRE(bytes.size() > 100);
  const std::string path = dir + "/cut.ckpt";
  for (size_t keep : {bytes.size() - 1, bytes.size() - 16, bytes.size() - 100, bytes.size() / 2, size_t{100},
                      size_t{10}, size_t{1}, size_t{0}}) {
    INFO("kept " << keep << " of " << bytes.size() << " bytes");
    write_bytes(path, bytes.data(), keep);
    CHECK_THAT(checkpoint_error([&] { ArchiveReader r(path); }), Contains(path));
    CHECK_THAT(checkpoint_error([&] { CheckpointReader r(path); }), Contains(path));
    CHECK_THAT(checkpoint_error([&] { load_checkpoint_file(path); }), Contains(path));
  }
  // The intact file reads.
  check_same_tensors(small_checkpoint().state_dict, load_checkpoint_file(full).state_dict);
}

TEST_CASE("CheckpointReader reads a full checkpoint tensor by tensor", "[checkpoint][reader]") {
  const std::string path = temp_dir("reader-full") + "/c.ckpt";
  const Checkpoint c = small_checkpoint();
  save_checkpoint_file(c, path);
  CheckpointReader r(path);
  CHECK(r.format() == "full");
  CHECK(r.path() == path);
  CHECK(r.epoch() == 2);
  CHECK(r.global_step() == 17);
  CHECK(r.world_size() == 1);
  CHECK(r.meta()["hyper_parameters"]["lr"].as<double>() == 0.5);
  CHECK(r.names(kModelSection) == std::vector<std::string>{"layer.bias", "layer.weight", "steps"});
  CHECK(r.names("no such section").empty());
  CHECK(r.has(kOptimizerSection, "layer.weight.exp_avg"));
  CHECK_FALSE(r.has(kModelSection, "layer.weight.exp_avg"));
  const ShardedTensor& w = r.tensor(kModelSection, "layer.weight");
  CHECK(w.dtype == torch::kFloat);
  CHECK(w.shape == std::vector<int64_t>{5, 4});
  CHECK(w.numel == 20);
  CHECK(torch::equal(r.read(kModelSection, "layer.weight"), c.state_dict.at("layer.weight")));
  CHECK(torch::equal(r.read_flat(kModelSection, "layer.weight", 3, 9),
                     c.state_dict.at("layer.weight").reshape({-1}).narrow(0, 3, 9)));
  CHECK_THAT(checkpoint_error([&] { r.tensor(kModelSection, "missing"); }), Contains(path));
  CHECK_THAT(checkpoint_error([&] { r.read(kModelSection, "missing"); }), Contains("missing"));
  CHECK_THAT(checkpoint_error([&] { r.read_flat(kModelSection, "layer.weight", 15, 6); }), Contains("out of range"));
}

TEST_CASE("CheckpointReader on a folder that is not a sharded checkpoint is a CheckpointError",
          "[checkpoint][reader]") {
  const std::string dir = temp_dir("reader-folder");
  write_bytes(dir + "/something.txt", "x", 1);
  auto msg = checkpoint_error([&] { CheckpointReader r(dir); });
  CHECK_THAT(msg, Contains(dir));
  CHECK_THAT(msg, Contains("not a sharded"));
}

TEST_CASE("a sharded checkpoint written by a world of one reads back through CheckpointReader",
          "[checkpoint][reader][sharded]") {
  const std::string root = temp_dir("sharded-one");
  const std::string dir = root + "/ck";
  const Checkpoint c = small_checkpoint();
  write_sharded(c, dir);
  // The folder and nothing else: the staging folder was swapped into place.
  CHECK(folder_entries(root) == std::vector<std::string>{"ck"});
  CHECK(fs::exists(fs::path(dir) / kManifestFile));
  CHECK(fs::exists(fs::path(dir) / kCompleteMarker));
  CHECK(fs::exists(fs::path(dir) / shard_file_name(0)));

  CheckpointReader r(dir);
  CHECK(r.format() == "sharded");
  CHECK(r.epoch() == 2);
  CHECK(r.global_step() == 17);
  CHECK(r.world_size() == 1);
  CHECK(r.meta()["hyper_parameters"]["lr"].as<double>() == 0.5);
  CHECK(r.names(kModelSection) == std::vector<std::string>{"layer.bias", "layer.weight", "steps"});
  const ShardedTensor& w = r.tensor(kModelSection, "layer.weight");
  CHECK(w.shape == std::vector<int64_t>{5, 4});  // the global shape, not the stored flat one
  REQUIRE(w.pieces.size() == 1);
  CHECK(w.pieces[0].rank == 0);
  CHECK(w.pieces[0].length == 20);
  for (const auto& [name, t] : c.state_dict) {
    INFO(name);
    const torch::Tensor back = r.read(kModelSection, name);
    CHECK(back.sizes() == t.sizes());
    CHECK(torch::equal(back, t));
  }
  CHECK(torch::equal(r.read_flat(kModelSection, "layer.weight", 7, 6),
                     c.state_dict.at("layer.weight").reshape({-1}).narrow(0, 7, 6)));
  CHECK(torch::equal(r.read(kOptimizerSection, "layer.weight.step"), c.optimizer_state.at("layer.weight.step")));
  CHECK(torch::equal(r.read(kRngSection, "rank0.cpu"), c.rng_states.at("rank0.cpu")));
  CHECK_THAT(checkpoint_error([&] { r.read_flat(kModelSection, "layer.weight", 0, 21); }), Contains("out of range"));

  // load_checkpoint_file assembles it whole.
  const Checkpoint back = load_checkpoint_file(dir);
  CHECK(back.epoch == 2);
  CHECK(back.global_step == 17);
  check_same_tensors(c.state_dict, back.state_dict);
  check_same_tensors(c.optimizer_state, back.optimizer_state);
  check_same_tensors(c.rng_states, back.rng_states);

  // One rank's file alone is refused, pointing at the folder.
  const std::string shard = (fs::path(dir) / shard_file_name(0)).string();
  auto msg = checkpoint_error([&] { CheckpointReader one(shard); });
  CHECK_THAT(msg, Contains(shard));
  CHECK_THAT(msg, Contains("folder"));

  // Saving again over it replaces it.
  Checkpoint c2 = c;
  c2.global_step = 18;
  c2.state_dict["layer.bias"] = torch::zeros({5});
  write_sharded(c2, dir);
  CHECK(folder_entries(root) == std::vector<std::string>{"ck"});
  const Checkpoint back2 = load_checkpoint_file(dir);
  CHECK(back2.global_step == 18);
  CHECK(torch::equal(back2.state_dict.at("layer.bias"), torch::zeros({5})));
}

TEST_CASE("damaged sharded checkpoints are CheckpointErrors saying what is wrong", "[checkpoint][reader][sharded]") {
  const std::string dir = temp_dir("sharded-bad") + "/ck";
  write_sharded(small_checkpoint(), dir);
  REQUIRE_NOTHROW(CheckpointReader(dir));
  const fs::path d(dir);
  SECTION("no COMPLETE marker") {
    fs::remove(d / kCompleteMarker);
    auto msg = checkpoint_error([&] { CheckpointReader r(dir); });
    CHECK_THAT(msg, Contains(dir));
    CHECK_THAT(msg, Contains("incomplete"));
  }
  SECTION("an edited manifest") {
    {
      std::ofstream out(d / kManifestFile, std::ios::app);
      out << " ";
    }
    auto msg = checkpoint_error([&] { CheckpointReader r(dir); });
    CHECK_THAT(msg, Contains(dir));
    CHECK_THAT(msg, Contains("checksum"));
  }
  SECTION("a missing rank file") {
    const std::string shard = (d / shard_file_name(0)).string();
    fs::remove(shard);
    auto msg = checkpoint_error([&] { CheckpointReader r(dir); });
    CHECK_THAT(msg, Contains(shard));
    CHECK_THAT(msg, Contains("rank 0"));
  }
  SECTION("a truncated rank file") {
    const std::string shard = (d / shard_file_name(0)).string();
    auto bytes = read_bytes(shard);
    write_bytes(shard, bytes.data(), bytes.size() / 2);
    CHECK_THAT(checkpoint_error([&] { CheckpointReader r(dir); }), Contains(shard));
  }
  SECTION("a flipped byte in a rank file's tensor data") {
    const std::string shard = (d / shard_file_name(0)).string();
    uint64_t offset = 0;
    {
      ArchiveReader a(shard);
      offset = a.find(kModelSection, "layer.weight")->offset;
    }
    auto bytes = read_bytes(shard);
    bytes[static_cast<size_t>(offset) + 9] ^= 0x01;
    write_bytes(shard, bytes.data(), bytes.size());
    CheckpointReader r(dir);
    auto msg = checkpoint_error([&] { r.read(kModelSection, "layer.weight"); });
    CHECK_THAT(msg, Contains(shard));
    CHECK_THAT(msg, Contains("checksum"));
    CHECK(torch::equal(r.read(kModelSection, "layer.bias"), small_checkpoint().state_dict.at("layer.bias")));
  }
}

TEST_CASE("consolidate_checkpoint turns a sharded folder into the equal full file", "[checkpoint][sharded]") {
  const std::string root = temp_dir("consolidate");
  const Checkpoint c = small_checkpoint();
  write_sharded(c, root + "/sharded");
  const uint64_t written = consolidate_checkpoint(root + "/sharded", root + "/full.ckpt");
  CHECK(written == fs::file_size(root + "/full.ckpt"));
  CheckpointReader r(root + "/full.ckpt");
  CHECK(r.format() == "full");
  CHECK(r.epoch() == 2);
  CHECK(r.global_step() == 17);
  CHECK(r.meta()["hyper_parameters"]["lr"].as<double>() == 0.5);
  CHECK(r.meta()["consolidated_from"].as<std::string>() == root + "/sharded");
  const Checkpoint back = load_checkpoint_file(root + "/full.ckpt");
  check_same_tensors(c.state_dict, back.state_dict);
  check_same_tensors(c.optimizer_state, back.optimizer_state);
  check_same_tensors(c.rng_states, back.rng_states);
  // A full file consolidates to the same tensors too.
  consolidate_checkpoint(root + "/full.ckpt", root + "/again.ckpt");
  check_same_tensors(c.state_dict, load_checkpoint_file(root + "/again.ckpt").state_dict);
  // A damaged source fails naming it, and writes nothing.
  fs::remove(fs::path(root) / "sharded" / kCompleteMarker);
  CHECK_THAT(checkpoint_error([&] { consolidate_checkpoint(root + "/sharded", root + "/bad.ckpt"); }),
             Contains(root + "/sharded"));
  CHECK_FALSE(fs::exists(root + "/bad.ckpt"));
}

TEST_CASE("ArchiveWriter: a full file replaces a sharded checkpoint folder of the same name", "[checkpoint][archive]") {
  // A run that switches state_dict_type from sharded to full in one folder saves last.ckpt again.
  const std::string dir = temp_dir("archive-over-folder");
  const std::string path = dir + "/last.ckpt";
  fs::create_directories(path);
  std::ofstream(path + "/rank_00000.ckpt") << "a shard";
  std::ofstream(path + "/manifest.yaml") << "format: sharded";  // what marks a sharded checkpoint
  ArchiveWriter w(path);
  w.add("s", "x", torch::full({4}, 2.0));
  w.commit({}, YAML::Node(YAML::NodeType::Map));
  REQUIRE(fs::is_regular_file(path));
  CHECK(torch::equal(ArchiveReader(path).read("s", "x"), torch::full({4}, 2.0)));
  CHECK(folder_entries(dir) == std::vector<std::string>{"last.ckpt"});  // the old folder is gone
}

TEST_CASE("an ArchiveReader reads one file while saves rename others over its path", "[checkpoint][archive]") {
  // A run rewriting last.ckpt while an evaluation reads it: each read sees one whole file, either
  // the old one or the new one, never one's index with the other's bytes (a false "corrupted").
  const std::string dir = temp_dir("archive-replaced");
  const std::string path = dir + "/last.ckpt";
  auto write = [&](const std::string& p, int64_t pad, float value) {
    ArchiveWriter w(p);
    w.add("s", "pad", torch::zeros({pad}));  // moves x to another offset in each file
    w.add("s", "x", torch::full({4096}, value));
    w.commit({}, YAML::Node(YAML::NodeType::Map));
  };
  write(dir + "/a", 10, 1.0f);
  write(dir + "/b", 5000, 2.0f);
  fs::copy_file(dir + "/a", path);
  std::atomic<bool> stop{false};
  std::thread saver([&] {
    for (int i = 0; !stop; ++i) {
      const std::string tmp = path + ".tmp";
      fs::copy_file(dir + (i % 2 ? "/a" : "/b"), tmp, fs::copy_options::overwrite_existing);
      fs::rename(tmp, path);
    }
  });
  int failures = 0, reads = 0;
  std::string first_error;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  while (std::chrono::steady_clock::now() < end) {
    try {
      ArchiveReader r(path);
      const torch::Tensor x = r.read("s", "x");
      const float v = x[0].item<float>();
      if (!(v == 1.0f || v == 2.0f) || !torch::equal(x, torch::full({4096}, v))) ++failures;
    } catch (const CheckpointError& e) {
      if (first_error.empty()) first_error = e.what();
      ++failures;
    }
    ++reads;
  }
  stop = true;
  saver.join();
  INFO(first_error);
  CHECK(reads > 20);
  CHECK(failures == 0);
}

TEST_CASE("a checkpoint path that cannot be resolved is a CheckpointError naming it", "[checkpoint][reader]") {
  const std::string dir = temp_dir("reader-link-loop");
  fs::create_symlink("loop_b", dir + "/loop_a");
  fs::create_symlink("loop_a", dir + "/loop_b");
  for (const std::string& path : {dir + "/loop_a", dir + "/" + std::string(300, 'x') + ".ckpt"}) {
    INFO(path);
    const std::string msg = checkpoint_error([&] { CheckpointReader r(path); });
    CHECK_THAT(msg, Contains("checkpoint '" + path + "'"));
    CHECK_THAT(checkpoint_error([&] { ArchiveReader r(path); }), Contains("checkpoint '" + path + "'"));
  }
}
