#include <ATen/CPUGeneratorImpl.h>
#include <caffe2/serialize/inline_container.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "boring_model.h"
#include "checkpoint/checkpoint_support.h"
#include "volt/checkpoint/checkpoint.h"
#include "volt/checkpoint/checkpoint_reader.h"
#include "volt/checkpoint/optimizer_state.h"
#include "volt/checkpoint/temp_file.h"
#include "volt/core/errors.h"
#include "volt/core/files.h"
#include "volt/strategies/strategy.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

Checkpoint sample_checkpoint() {
  Checkpoint c;
  c.epoch = 3;
  c.global_step = 42;
  auto gen = at::detail::createCPUGenerator(5);
  c.state_dict["block0.linear.weight"] = torch::randn({4, 3}, gen);
  c.state_dict["block0.linear.bias"] = torch::randn({4}, gen);
  c.state_dict["counts"] = torch::arange(6, torch::kLong).reshape({2, 3});
  c.state_dict["mask"] = torch::tensor({true, false, true});
  c.state_dict["half"] = torch::randn({5}, gen).to(torch::kBFloat16);
  c.state_dict["dbl"] = torch::randn({2, 2}, gen).to(torch::kDouble);
  c.state_dict["scalar"] = torch::tensor(3.5);
  c.state_dict["empty"] = torch::zeros({0, 3});
  c.state_dict["transposed"] = torch::randn({3, 5}, gen).t();  // not contiguous
  c.optimizer_state["block0.linear.weight.exp_avg"] = torch::randn({4, 3}, gen);
  c.optimizer_state["block0.linear.weight.step"] = torch::tensor(7, torch::kLong);
  c.rng_states["rank0.cpu"] = torch::arange(40, torch::kByte);
  c.meta["loops"]["batch_in_epoch"] = 5;
  c.meta["hyper_parameters"]["lr"] = 0.25;
  c.meta["hyper_parameters"]["layers"].push_back(32);
  c.meta["hyper_parameters"]["layers"].push_back(16);
  c.meta["extra"]["note"] = "hello: world";
  return c;
}

/// Rewrites the zip at `path` record by record, passing its volt index (volt/index.yaml) through
/// `edit`: a file that is valid in every way except what `edit` changes.
void rewrite_index(const std::string& path, const std::function<void(YAML::Node&)>& edit) {
  std::vector<std::pair<std::string, std::string>> records;
  bool had_index = false;
  {
    caffe2::serialize::PyTorchStreamReader in(path);
    for (const auto& name : in.getAllRecords()) {
      if (name == "version" || name == ".data/version") continue;  // the writer adds its own
      auto [data, size] = in.getRecord(name);
      std::string bytes(static_cast<const char*>(data.get()), size);
      if (name == "volt/index.yaml") {
        had_index = true;
        YAML::Node index = YAML::Load(bytes);
        edit(index);
        bytes = YAML::Dump(index);
      }
      records.emplace_back(name, std::move(bytes));
    }
  }
  REQUIRE(had_index);
  std::string out;
  {
    caffe2::serialize::PyTorchStreamWriter w([&](const void* d, size_t n) -> size_t {
      out.append(static_cast<const char*>(d), n);
      return n;
    });
    for (const auto& [name, bytes] : records) w.writeRecord(name, bytes.data(), bytes.size());
    w.writeEndOfFile();
  }
  write_bytes(path, out.data(), out.size());
}

std::shared_ptr<BoringModel> model(uint64_t seed, BoringOptions o = {}) {
  torch::manual_seed(seed);
  return std::make_shared<BoringModel>(o);
}

NamedTensors named(torch::nn::Module& m) {
  NamedTensors out;
  for (auto& kv : m.named_parameters()) out.emplace_back(kv.key(), kv.value());
  return out;
}

void train_steps(BoringModel& m, torch::optim::Optimizer& opt, int64_t first_batch, int64_t n) {
  RandomDataset ds(64, 32, 3);
  for (int64_t i = first_batch; i < first_batch + n; ++i) {
    std::vector<Batch> samples;
    for (int64_t k = 0; k < 8; ++k) samples.push_back(ds.get((i * 8 + k) % 64));
    auto x = collate(samples)[0];
    opt.zero_grad();
    auto out = m.forward(x);
    torch::mse_loss(out, torch::ones_like(out)).backward();
    opt.step();
  }
}

void copy_params(torch::nn::Module& from, torch::nn::Module& to) {
  torch::NoGradGuard ng;
  auto a = from.parameters(), b = to.parameters();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) b[i].copy_(a[i]);
}

bool params_equal(torch::nn::Module& a, torch::nn::Module& b) {
  auto x = a.parameters(), y = b.parameters();
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i)
    if (!torch::equal(x[i], y[i])) return false;
  return true;
}

using MakeOpt = std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>;

/// Optimizer state survives a checkpoint file: the restored state is the saved one, and training
/// continues exactly as without the interruption.
void check_optimizer_roundtrip(const MakeOpt& make, const std::vector<std::string>& expected_fields) {
  auto m1 = model(1);
  auto opt1 = make(m1->parameters());
  train_steps(*m1, *opt1, 0, 3);
  auto state = optimizer_state_to_tensors(*opt1, named(*m1));
  for (const auto& [name, p] : named(*m1))
    for (const auto& f : expected_fields) {
      INFO(name << "." << f);
      CHECK(state.count(name + "." + f));
    }

  Checkpoint c;
  c.optimizer_state = state;
  const std::string path = temp_dir("ckpt-opt") + "/opt.ckpt";
  save_checkpoint_file(c, path);
  auto loaded = load_checkpoint_file(path).optimizer_state;
  check_same_tensors(state, loaded);

  auto m2 = model(2);  // other weights, then m1's
  copy_params(*m1, *m2);
  auto opt2 = make(m2->parameters());
  optimizer_state_from_tensors(*opt2, named(*m2), loaded, path);
  check_same_tensors(state, optimizer_state_to_tensors(*opt2, named(*m2)));

  // Without the state, the continuation differs (so the check below means something).
  auto m3 = model(3);
  copy_params(*m1, *m3);
  auto opt3 = make(m3->parameters());

  train_steps(*m1, *opt1, 3, 3);
  train_steps(*m2, *opt2, 3, 3);
  train_steps(*m3, *opt3, 3, 3);
  CHECK(params_equal(*m1, *m2));
  CHECK_FALSE(params_equal(*m1, *m3));

  // State of a model with other shapes is refused.
  BoringOptions narrow;
  narrow.hidden = 16;
  auto small = model(4, narrow);
  auto opt4 = make(small->parameters());
  auto msg = checkpoint_error([&] { optimizer_state_from_tensors(*opt4, named(*small), loaded, path); });
  CHECK_THAT(msg, Contains(path));
}

}  // namespace

TEST_CASE("checkpoint file round trip", "[checkpoint]") {
  const std::string dir = temp_dir("ckpt-roundtrip");
  const std::string path = dir + "/sub/dir/model.ckpt";  // parent directories are created
  const Checkpoint c = sample_checkpoint();
  save_checkpoint_file(c, path);
  REQUIRE(fs::exists(path));
  // Only the file: no temporary left behind.
  int entries = 0;
  for (auto& e : fs::directory_iterator(dir + "/sub/dir")) {
    ++entries;
    CHECK(e.path().filename() == "model.ckpt");
  }
  CHECK(entries == 1);

  const Checkpoint r = load_checkpoint_file(path);
  CHECK(r.epoch == 3);
  CHECK(r.global_step == 42);
  check_same_tensors(c.state_dict, r.state_dict);
  check_same_tensors(c.optimizer_state, r.optimizer_state);
  check_same_tensors(c.rng_states, r.rng_states);
  CHECK(r.meta["loops"]["batch_in_epoch"].as<int>() == 5);
  CHECK(r.meta["hyper_parameters"]["lr"].as<double>() == 0.25);
  REQUIRE(r.meta["hyper_parameters"]["layers"].IsSequence());
  CHECK(r.meta["hyper_parameters"]["layers"][1].as<int>() == 16);
  CHECK(r.meta["extra"]["note"].as<std::string>() == "hello: world");
  // The metadata comes back as it was given: the index's own bookkeeping (epoch, global_step, the
  // checksums) is not mixed into it.
  CHECK(YAML::Dump(r.meta) == YAML::Dump(c.meta));
  CHECK_FALSE(r.meta["global_step"]);
  CHECK_FALSE(r.meta["checksums"]);

  // torch.save-compatible layout: Lightning's top-level dict, the tensors' data in the records.
  auto root = torch::pickle_load(read_bytes(path));
  REQUIRE(root.isGenericDict());
  auto d = root.toGenericDict();
  std::set<std::string> keys;
  for (const auto& kv : d) keys.insert(kv.key().toStringRef());
  CHECK(keys == std::set<std::string>{"epoch", "global_step", "format_version", "volt_meta", "state_dict",
                                      "optimizer_states", "rng_states"});
  CHECK(d.at("epoch").toInt() == 3);
  CHECK(d.at("global_step").toInt() == 42);
  CHECK(d.at("format_version").toInt() == kCheckpointFormatVersion);
  CHECK(YAML::Load(d.at("volt_meta").toStringRef())["extra"]["note"].as<std::string>() == "hello: world");
  auto pickled_sd = d.at("state_dict").toGenericDict();
  CHECK(pickled_sd.size() == c.state_dict.size());
  for (const auto& [k, v] : c.state_dict) {
    INFO("pickled state_dict/" << k);
    REQUIRE(pickled_sd.contains(k));
    CHECK(torch::equal(pickled_sd.at(k).toTensor(), v));
  }
  auto pickled_opt = d.at("optimizer_states").toGenericDict();
  REQUIRE(pickled_opt.contains("block0.linear.weight.step"));
  CHECK(pickled_opt.at("block0.linear.weight.step").toTensor().item<int64_t>() == 7);
  auto pickled_rng = d.at("rng_states").toGenericDict();
  REQUIRE(pickled_rng.contains("rank0.cpu"));
  CHECK(torch::equal(pickled_rng.at("rank0.cpu").toTensor(), c.rng_states.at("rank0.cpu")));

  // Overwriting an existing checkpoint replaces it.
  Checkpoint c2 = c;
  c2.global_step = 43;
  save_checkpoint_file(c2, path);
  CHECK(load_checkpoint_file(path).global_step == 43);
}

TEST_CASE("a failed write leaves the previous file intact", "[checkpoint]") {
  const std::string dir = temp_dir("ckpt-atomic");
  const std::string path = dir + "/model.ckpt";
  Checkpoint old = sample_checkpoint();
  save_checkpoint_file(old, path);
  const auto before = read_bytes(path);
  Checkpoint next = sample_checkpoint();
  next.global_step = 1000;
  next.state_dict["block0.linear.weight"] = torch::zeros({4, 3});

  SECTION("the temporary file cannot be created") {
    // The writer's temporary is <path>.tmp.h<tag>.<pid>; a directory there makes creating it fail.
    const std::string tmp = volt::detail::temp_sibling_name(path, ::getpid());
    fs::create_directories(tmp);
    auto msg = checkpoint_error([&] { save_checkpoint_file(next, path); });
    CHECK_THAT(msg, Contains(path));
    volt::detail::remove_tree(tmp);
  }
  SECTION("the final rename fails") {
    // A path that is a directory cannot be replaced by a file; an existing file elsewhere stays.
    const std::string as_dir = dir + "/taken.ckpt";
    fs::create_directories(as_dir + "/inside");
    auto msg = checkpoint_error([&] { save_checkpoint_file(next, as_dir); });
    CHECK_THAT(msg, Contains(as_dir));
    CHECK(fs::is_directory(as_dir + "/inside"));
    // No temporary left behind.
    for (auto& e : fs::directory_iterator(dir)) {
      INFO(e.path());
      CHECK(e.path().filename().string().find(".tmp.") == std::string::npos);
    }
  }
  SECTION("the directory is not writable") {
    if (::geteuid() == 0) {
      WARN("running as root: permissions do not stop writes, skipped");
    } else {
      ::chmod(dir.c_str(), 0555);
      auto msg = checkpoint_error([&] { save_checkpoint_file(next, path); });
      ::chmod(dir.c_str(), 0755);
      CHECK_THAT(msg, Contains(path));
    }
  }
  CHECK(read_bytes(path) == before);
  const Checkpoint r = load_checkpoint_file(path);
  CHECK(r.global_step == old.global_step);
  CHECK(torch::equal(r.state_dict.at("block0.linear.weight"), old.state_dict.at("block0.linear.weight")));
}

TEST_CASE("writing under a path whose parent is a file is a CheckpointError naming the path", "[checkpoint]") {
  const std::string dir = temp_dir("ckpt-parentfile");
  write_bytes(dir + "/afile", "x", 1);
  const std::string path = dir + "/afile/model.ckpt";
  auto msg = checkpoint_error([&] { save_checkpoint_file(sample_checkpoint(), path); });
  CHECK_THAT(msg, Contains(path));
  CHECK(read_bytes(dir + "/afile") == std::vector<char>{'x'});
}

TEST_CASE("missing, empty, truncated and foreign files are CheckpointErrors naming the file", "[checkpoint]") {
  const std::string dir = temp_dir("ckpt-bad");
  SECTION("missing") {
    auto msg = checkpoint_error([&] { load_checkpoint_file(dir + "/nope.ckpt"); });
    CHECK_THAT(msg, Contains(dir + "/nope.ckpt"));
    CHECK_THAT(msg, Contains("does not exist"));
  }
  SECTION("a directory") {
    CHECK_THAT(checkpoint_error([&] { load_checkpoint_file(dir); }), Contains(dir));
  }
  SECTION("empty") {
    write_bytes(dir + "/empty.ckpt", "", 0);
    CHECK_THAT(checkpoint_error([&] { load_checkpoint_file(dir + "/empty.ckpt"); }), Contains(dir + "/empty.ckpt"));
  }
  SECTION("truncated") {
    const std::string path = dir + "/cut.ckpt";
    save_checkpoint_file(sample_checkpoint(), path);
    auto bytes = read_bytes(path);
    for (size_t keep : {bytes.size() / 2, bytes.size() - 16, size_t{100}}) {
      INFO("kept " << keep << " of " << bytes.size() << " bytes");
      write_bytes(path, bytes.data(), keep);
      auto msg = checkpoint_error([&] { load_checkpoint_file(path); });
      CHECK_THAT(msg, Contains(path));
    }
  }
  SECTION("not a checkpoint") {
    const std::string path = dir + "/text.ckpt";
    write_bytes(path, "hello world, not a zip", 22);
    CHECK_THAT(checkpoint_error([&] { load_checkpoint_file(path); }), Contains(path));
  }
  SECTION("a torch pickle that is not a volt checkpoint") {
    // A plain torch.save file (what volt before format 2 wrote, too): no volt index.
    const std::string path = dir + "/foreign.pt";
    c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
    d.insert("weights", torch::ones({2}));
    auto bytes = torch::pickle_save(d);
    write_bytes(path, bytes.data(), bytes.size());
    auto msg = checkpoint_error([&] { load_checkpoint_file(path); });
    CHECK_THAT(msg, Contains(path));
    CHECK_THAT(msg, Contains("not a volt checkpoint"));
  }
  SECTION("another format version") {
    // A valid checkpoint whose index says it is of the next format version.
    const std::string path = dir + "/future.ckpt";
    save_checkpoint_file(sample_checkpoint(), path);
    REQUIRE_NOTHROW(load_checkpoint_file(path));  // the rewrite alone changes nothing else
    rewrite_index(path, [](YAML::Node& index) {});
    REQUIRE_NOTHROW(load_checkpoint_file(path));
    int64_t future = 0;
    rewrite_index(path, [&](YAML::Node& index) {
      future = index["format_version"].as<int64_t>() + 1;
      index["format_version"] = future;
    });
    auto msg = checkpoint_error([&] { load_checkpoint_file(path); });
    CHECK_THAT(msg, Contains(path));
    CHECK_THAT(msg, Contains("format version " + std::to_string(future)));
  }
}

TEST_CASE("a flipped byte in tensor data is detected", "[checkpoint]") {
  const std::string path = temp_dir("ckpt-flip") + "/flip.ckpt";
  Checkpoint c;
  c.state_dict["big"] = torch::full({4096}, 0.7f);
  c.state_dict["other"] = torch::ones({3});
  save_checkpoint_file(c, path);
  auto bytes = read_bytes(path);

  // Find a long run of 0.7f's bytes: that is inside the tensor's data record.
  const float v = 0.7f;
  std::vector<char> pattern;
  for (int i = 0; i < 64; ++i)
    pattern.insert(pattern.end(), reinterpret_cast<const char*>(&v), reinterpret_cast<const char*>(&v) + sizeof v);
  auto at = std::search(bytes.begin(), bytes.end(), pattern.begin(), pattern.end());
  REQUIRE(at != bytes.end());
  const size_t offset = static_cast<size_t>(at - bytes.begin()) + 4 * 1000 + 1;  // well inside the run
  REQUIRE(offset < bytes.size());
  bytes[offset] ^= 0x10;
  write_bytes(path, bytes.data(), bytes.size());

  auto msg = checkpoint_error([&] { load_checkpoint_file(path); });
  INFO(msg);
  CHECK_THAT(msg, Contains(path));
  CHECK_THAT(msg, Contains("checksum"));
  CHECK_THAT(msg, Contains("big"));  // names the damaged tensor
  // The undamaged tensor still reads.
  CheckpointReader reader(path);
  CHECK(torch::equal(reader.read(kModelSection, "other"), torch::ones({3})));
  CHECK_THAT(checkpoint_error([&] { reader.read(kModelSection, "big"); }), Contains("checksum"));
}

TEST_CASE("loading a checkpoint into a model of another shape is a CheckpointError", "[checkpoint]") {
  SingleDeviceStrategy s(Precision("32-true", "cpu"), "cpu");
  auto m = model(0);
  const std::string dir = temp_dir("ckpt-shape");
  const std::string path = dir + "/m.ckpt";
  s.save_checkpoint(*m, {}, Checkpoint{}, path);
  CheckpointReader reader(path);
  CHECK(reader.format() == "full");
  CHECK(reader.names(kModelSection).size() == m->named_parameters().size());

  // Same shape: loads, weights equal.
  auto same = model(9);
  REQUIRE_FALSE(params_equal(*m, *same));
  s.load_checkpoint(*same, {}, reader);
  CHECK(params_equal(*m, *same));

  BoringOptions narrow;
  narrow.hidden = 16;
  auto other = model(0, narrow);
  auto msg = checkpoint_error([&] { s.load_checkpoint(*other, {}, reader); });
  CHECK_THAT(msg, Contains(path));
  CHECK_THAT(msg, Contains("block0.linear.weight"));

  BoringOptions deeper;
  deeper.blocks = 3;
  auto more = model(0, deeper);
  CHECK_THAT(checkpoint_error([&] { s.load_checkpoint(*more, {}, reader); }), Contains("block2"));
  // A checkpoint with extra tensors is refused too.
  const std::string more_path = dir + "/more.ckpt";
  s.save_checkpoint(*more, {}, Checkpoint{}, more_path);
  CheckpointReader more_reader(more_path);
  CHECK_THAT(checkpoint_error([&] { s.load_checkpoint(*m, {}, more_reader); }), Contains(more_path));
}

TEST_CASE("SingleDeviceStrategy::save_checkpoint and load_checkpoint carry the model and the optimizer state",
          "[checkpoint]") {
  SingleDeviceStrategy s(Precision("32-true", "cpu"), "cpu");
  auto m1 = model(1);
  torch::optim::Adam opt1(m1->parameters(), torch::optim::AdamOptions(0.01));
  train_steps(*m1, opt1, 0, 3);
  const auto state = optimizer_state_to_tensors(opt1, named(*m1));
  REQUIRE_FALSE(state.empty());

  const std::string dir = temp_dir("ckpt-strategy");
  Checkpoint header;
  header.epoch = 2;
  header.global_step = 3;
  header.meta["extra"]["tag"] = "strategy";
  header.rng_states["cpu"] = torch::arange(8, torch::kByte);
  s.save_checkpoint(*m1, {&opt1}, header, dir + "/full.ckpt");
  s.save_checkpoint(*m1, {}, header, dir + "/weights.ckpt");

  CheckpointReader r(dir + "/full.ckpt");
  CHECK(r.epoch() == 2);
  CHECK(r.global_step() == 3);
  CHECK(r.meta()["extra"]["tag"].as<std::string>() == "strategy");
  CHECK(r.names(kOptimizerSection).size() == state.size());
  // This rank's generators are stored under its rank.
  CHECK(r.names(kRngSection) == std::vector<std::string>{"rank0.cpu"});
  CHECK(torch::equal(r.read(kRngSection, "rank0.cpu"), torch::arange(8, torch::kByte)));
  CHECK(CheckpointReader(dir + "/weights.ckpt").names(kOptimizerSection).empty());

  auto m2 = model(2);
  torch::optim::Adam opt2(m2->parameters(), torch::optim::AdamOptions(0.01));
  REQUIRE_FALSE(params_equal(*m1, *m2));
  s.load_checkpoint(*m2, {&opt2}, r);
  CHECK(params_equal(*m1, *m2));
  check_same_tensors(state, optimizer_state_to_tensors(opt2, named(*m2)));
  // Training continues as the uninterrupted run.
  train_steps(*m1, opt1, 3, 2);
  train_steps(*m2, opt2, 3, 2);
  CHECK(params_equal(*m1, *m2));
}

TEST_CASE("Trainer::save_checkpoint writes Lightning's fields", "[checkpoint]") {
  const std::string root = temp_dir("ckpt-trainer");
  auto m = model(0, BoringOptions{32, 32, 2, 0.01, 0.0, /*adam=*/true});
  auto opts = quiet_options(root);
  opts.max_steps = 3;
  Trainer t(opts);
  DataLoaderOptions lo;
  lo.batch_size = 8;
  DataLoader dl(std::make_shared<RandomDataset>(64), lo);
  t.fit(*m, dl);
  // The CPU generator's state as the checkpoint sees it (saving draws no random numbers).
  const torch::Tensor cpu_rng = at::detail::getDefaultCPUGenerator().get_state();
  t.save_checkpoint(root + "/full.ckpt");
  t.save_checkpoint(root + "/weights.ckpt", /*weights_only=*/true);

  auto full = load_checkpoint_file(root + "/full.ckpt");
  CHECK(full.global_step == 3);
  CHECK(full.epoch == 0);
  CHECK(full.meta["loops"]["batch_in_epoch"].as<int>() == 3);
  CHECK(full.meta["precision"].as<std::string>() == "32-true");
  CHECK_FALSE(full.meta["weights_only"].as<bool>());
  CHECK(full.optimizer_state.count("head.weight.exp_avg"));
  REQUIRE(full.optimizer_state.count("head.weight.step"));
  CHECK(full.optimizer_state.at("head.weight.step").item<int64_t>() == 3);
  // state_dict has the module's own names and values.
  REQUIRE(full.state_dict.size() == m->named_parameters().size());
  for (auto& kv : m->named_parameters()) {
    INFO(kv.key());
    REQUIRE(full.state_dict.count(kv.key()));
    CHECK(torch::equal(full.state_dict.at(kv.key()), kv.value()));
  }

  // RNG states of every rank, as Lightning's "rng_states" (rank 0 only here).
  CHECK(full.rng_states.size() == 1);
  REQUIRE(full.rng_states.count("rank0.cpu"));
  const auto& saved_rng = full.rng_states.at("rank0.cpu");
  CHECK(saved_rng.scalar_type() == torch::kByte);
  CHECK(saved_rng.sizes() == cpu_rng.sizes());
  CHECK(torch::equal(saved_rng, cpu_rng));
  // Drawing changes the generator, so the comparison above says something.
  (void)torch::rand({4});
  CHECK_FALSE(torch::equal(saved_rng, at::detail::getDefaultCPUGenerator().get_state()));

  auto w = load_checkpoint_file(root + "/weights.ckpt");
  CHECK(w.optimizer_state.empty());
  CHECK(w.rng_states.empty());
  CHECK(w.meta["weights_only"].as<bool>());
  check_same_tensors(full.state_dict, w.state_dict);
}

TEST_CASE("optimizer state round trip: Adam", "[checkpoint][optimizer_state]") {
  check_optimizer_roundtrip(
      [](std::vector<torch::Tensor> p) {
        return std::make_unique<torch::optim::Adam>(p, torch::optim::AdamOptions(0.01));
      },
      {"step", "exp_avg", "exp_avg_sq"});
}

TEST_CASE("optimizer state round trip: AdamW with amsgrad", "[checkpoint][optimizer_state]") {
  check_optimizer_roundtrip(
      [](std::vector<torch::Tensor> p) {
        return std::make_unique<torch::optim::AdamW>(p, torch::optim::AdamWOptions(0.01).amsgrad(true));
      },
      {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"});
}

TEST_CASE("optimizer state round trip: SGD with momentum", "[checkpoint][optimizer_state]") {
  check_optimizer_roundtrip(
      [](std::vector<torch::Tensor> p) {
        return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.05).momentum(0.9));
      },
      {"momentum_buffer"});
}

TEST_CASE("optimizer state round trip: RMSprop and Adagrad", "[checkpoint][optimizer_state]") {
  check_optimizer_roundtrip(
      [](std::vector<torch::Tensor> p) {
        return std::make_unique<torch::optim::RMSprop>(p, torch::optim::RMSpropOptions(0.01).momentum(0.5));
      },
      {"step", "square_avg", "momentum_buffer"});
  check_optimizer_roundtrip(
      [](std::vector<torch::Tensor> p) {
        return std::make_unique<torch::optim::Adagrad>(p, torch::optim::AdagradOptions(0.05));
      },
      {"step", "sum"});
}

TEST_CASE("optimizer state: a fresh optimizer has none, and missing entries leave params fresh",
          "[checkpoint][optimizer_state]") {
  auto m = model(0);
  torch::optim::Adam opt(m->parameters(), torch::optim::AdamOptions(0.01));
  CHECK(optimizer_state_to_tensors(opt, named(*m)).empty());
  // Restoring nothing keeps it stateless and usable.
  optimizer_state_from_tensors(opt, named(*m), {}, "none");
  CHECK(opt.state().empty());
}
