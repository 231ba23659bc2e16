// load_weights and save_safetensors: weights written by Python PyTorch (golden files from
// tests/golden/make_foreign_weights.py) reproduce Python's outputs in LibTorch, files volt writes are
// read by Python, strict and non-strict loading name every difference, and volt's own checkpoints
// (full, and sharded by 2 FSDP ranks) load and consolidate to safetensors.
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "boring_model.h"
#include "checkpoint/checkpoint_support.h"
#include "distributed/multi_rank.h"
#include "volt/checkpoint/checkpoint.h"
#include "volt/checkpoint/checkpoint_reader.h"
#include "volt/checkpoint/safetensors.h"
#include "volt/checkpoint/torch_save.h"
#include "volt/checkpoint/weights.h"
#include "volt/core/errors.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

const std::string kGolden = std::string(VOLT_SOURCE_DIR) + "/tests/golden/";
const char* const kPython = "/usr/bin/python3";

/// The LibTorch twin of make_foreign_weights.py's make_model(): the same names and shapes.
torch::nn::Sequential golden_model(uint64_t seed = 99) {
  torch::manual_seed(seed);
  torch::nn::Sequential m(torch::nn::Linear(8, 16), torch::nn::LayerNorm(torch::nn::LayerNormOptions({16})),
                          torch::nn::Tanh(), torch::nn::BatchNorm1d(16), torch::nn::Linear(16, 4));
  m->eval();
  return m;
}

torch::Tensor json_matrix(const YAML::Node& rows) {
  std::vector<torch::Tensor> out;
  for (const auto& r : rows) out.push_back(torch::tensor(r.as<std::vector<double>>(), torch::kDouble));
  return torch::stack(out);
}

struct Golden {
  torch::Tensor input, output;
  std::vector<std::string> names;
};

const Golden& golden() {
  static const Golden g = [] {
    const YAML::Node j = YAML::LoadFile(kGolden + "foreign_weights.json");
    Golden out;
    out.input = json_matrix(j["input"]).to(torch::kFloat);
    out.output = json_matrix(j["output"]);
    out.names = j["names"].as<std::vector<std::string>>();
    return out;
  }();
  return g;
}

double output_diff(torch::nn::Sequential& m) {
  torch::NoGradGuard ng;
  return (m->forward(golden().input).to(torch::kDouble) - golden().output).abs().max().item<double>();
}

std::map<std::string, torch::Tensor> module_state(const torch::nn::Module& m) {
  std::map<std::string, torch::Tensor> s;
  for (const auto& p : m.named_parameters()) s[p.key()] = p.value().detach().clone();
  for (const auto& b : m.named_buffers()) s[b.key()] = b.value().detach().clone();
  return s;
}

std::string copy_to(const std::string& src, const std::string& dst) {
  fs::copy_file(src, dst, fs::copy_options::overwrite_existing);
  return dst;
}

bool python_torch_available() {
  static const bool ok = [] {
    const auto codes = run_processes({{kPython, "-c", "import torch"}}, {}, 300, temp_dir("py-probe") + "/probe");
    return codes.at(0) == 0;
  }();
  return ok;
}

int run_python(const std::string& dir, const std::string& script, const std::vector<std::string>& args,
               std::string& output) {
  const std::string file = dir + "/check.py";
  std::ofstream(file) << script;
  std::vector<std::string> argv = {kPython, file};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<std::map<std::string, std::string>> env(1);
  env[0]["PYTHONDONTWRITEBYTECODE"] = "1";  // no __pycache__ in tests/golden
  const auto codes = run_processes({argv}, env, 300, dir + "/python");
  output = read_text(dir + "/python.0.log");
  return codes.at(0);
}

}  // namespace

TEST_CASE(
    "weights saved by Python (torch.save state_dict, safetensors, a Lightning checkpoint, a pickled module) "
    "give Python's outputs",
    "[weights][golden]") {
  struct Case {
    std::string file, format, prefix;
    int64_t skipped;
  };
  for (const Case& c :
       {Case{"foreign_weights.pt", "torch.save", "", 0}, Case{"foreign_weights.safetensors", "safetensors", "", 0},
        Case{"foreign_lightning.pt", "torch.save", "model.", 26}, Case{"foreign_module.pt", "torch.save", "", 0}}) {
    DYNAMIC_SECTION(c.file) {
      auto m = golden_model();
      CHECK(output_diff(m) > 1e-2);  // a fresh model disagrees: the loaded weights make the outputs agree
      LoadWeightsOptions o;
      o.prefix = c.prefix;
      const LoadWeightsReport r = load_weights(*m, kGolden + c.file, o);
      CHECK(r.format == c.format);
      CHECK(r.loaded == 11);
      CHECK(r.missing.empty());
      CHECK(r.unexpected.empty());
      CHECK(r.mismatched.empty());
      CHECK(r.converted.empty());
      CHECK(r.skipped == c.skipped);  // the Lightning file's optimizer and callback tensors
      CHECK(output_diff(m) < 1e-6);
      // The int64 buffer came through as such (3 training batches in Python).
      CHECK(m->named_buffers()["3.num_batches_tracked"].item<int64_t>() == 3);
    }
  }
  // The two formats hold the same tensors, read by volt's two readers.
  TorchSaveReader pt(kGolden + "foreign_weights.pt");
  CHECK(pt.names() == golden().names);  // the state_dict's order
  const auto st = load_safetensors(kGolden + "foreign_weights.safetensors");
  CHECK(SafetensorsReader(kGolden + "foreign_weights.safetensors").metadata().at("format") == "pt");
  REQUIRE(st.size() == pt.names().size());
  for (const auto& n : pt.names()) CHECK(torch::equal(st.at(n), pt.read(n)));
}

TEST_CASE("the format comes from the content, not the name, and files volt cannot read say what to do", "[weights]") {
  const std::string dir = temp_dir("weights-detect");
  {  // swapped extensions
    auto m = golden_model();
    CHECK(load_weights(*m, copy_to(kGolden + "foreign_weights.safetensors", dir + "/w.pt")).format == "safetensors");
    CHECK(output_diff(m) < 1e-6);
    auto m2 = golden_model();
    CHECK(load_weights(*m2, copy_to(kGolden + "foreign_weights.pt", dir + "/w.safetensors")).format == "torch.save");
    CHECK(output_diff(m2) < 1e-6);
  }
  auto m = golden_model();
  const auto before = module_state(*m);
  const std::string legacy = kGolden + "foreign_legacy.pt";
  CHECK_THAT(checkpoint_error([&] { load_weights(*m, legacy); }),
             Contains(legacy) && Contains("legacy") && Contains("_use_new_zipfile_serialization=True"));
  write_bytes(dir + "/text.bin", "hello, weights", 14);
  CHECK_THAT(checkpoint_error([&] { load_weights(*m, dir + "/text.bin"); }),
             Contains(dir + "/text.bin") && Contains("not a weights file") && Contains("safetensors"));
  write_bytes(dir + "/empty.bin", "", 0);
  CHECK_THAT(checkpoint_error([&] { load_weights(*m, dir + "/empty.bin"); }), Contains("empty"));
  CHECK_THAT(checkpoint_error([&] { load_weights(*m, dir + "/absent.pt"); }),
             Contains(dir + "/absent.pt") && Contains("does not exist"));
  const auto pt = read_bytes(kGolden + "foreign_weights.pt");
  write_bytes(dir + "/cut.pt", pt.data(), pt.size() / 2);
  CHECK_THAT(checkpoint_error([&] { load_weights(*m, dir + "/cut.pt"); }), Contains(dir + "/cut.pt"));
  fs::create_directories(dir + "/folder");
  CHECK_THAT(checkpoint_error([&] { load_weights(*m, dir + "/folder"); }), Contains("not a sharded"));
  check_same_tensors(before, module_state(*m));  // none of it touched the module
}

TEST_CASE("LibTorch files load too: torch::save of a module, and plain and nested dicts from torch::pickle_save",
          "[weights]") {
  const std::string dir = temp_dir("weights-libtorch");
  auto src = golden_model(5);
  {
    torch::NoGradGuard ng;
    for (auto& p : src->parameters()) p.add_(0.5);
  }
  torch::save(src, dir + "/module.pt");
  auto m = golden_model(6);
  const auto r = load_weights(*m, dir + "/module.pt");
  CHECK(r.format == "torchscript");
  CHECK(r.loaded == 11);
  check_same_tensors(module_state(*src), module_state(*m));

  // {"0": {"weight", "bias"}, "4.weight": ..., "4.bias": ...}: nested names join with dots.
  c10::impl::GenericDict inner(c10::StringType::get(), c10::AnyType::get());
  inner.insert("weight", torch::full({16, 8}, 0.25));
  inner.insert("bias", torch::full({16}, -1.0));
  c10::impl::GenericDict root(c10::StringType::get(), c10::AnyType::get());
  root.insert("0", inner);
  root.insert("4.weight", torch::full({4, 16}, 2.0));
  root.insert("4.bias", torch::arange(4, torch::kFloat));
  root.insert("note", std::string("not a tensor"));
  const auto bytes = torch::pickle_save(root);
  write_bytes(dir + "/nested.pt", bytes.data(), bytes.size());
  LoadWeightsOptions loose;
  loose.strict = false;
  const auto n = load_weights(*m, dir + "/nested.pt", loose);
  CHECK(n.format == "torch.save");
  CHECK(n.loaded == 4);
  CHECK(n.missing.size() == 7);
  CHECK(torch::equal(m->named_parameters()["0.weight"], torch::full({16, 8}, 0.25)));
  CHECK(torch::equal(m->named_parameters()["4.bias"], torch::arange(4, torch::kFloat)));
}

TEST_CASE(
    "strict loading names every missing, unexpected and mismatched tensor with its shape, and non-strict loads "
    "the rest",
    "[weights]") {
  // Another architecture: 3 is a Linear where the file has BatchNorm1d, 4 is narrower, 5 is new.
  auto make = [] {
    torch::manual_seed(7);
    return torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::LayerNorm(torch::nn::LayerNormOptions({16})),
                                 torch::nn::Tanh(), torch::nn::Linear(16, 16), torch::nn::Linear(16, 3),
                                 torch::nn::Linear(3, 1));
  };
  const std::string file = kGolden + "foreign_weights.safetensors";
  auto m = make();
  const auto before = module_state(*m);
  const std::string msg = checkpoint_error([&] { load_weights(*m, file); });
  CHECK_THAT(msg, Contains(file) && Contains("safetensors"));
  CHECK_THAT(msg, Contains("2 missing, 3 unexpected, 3 of another shape"));
  CHECK_THAT(msg, Contains("5.weight [1, 3]") && Contains("5.bias [1]"));
  CHECK_THAT(msg,
             Contains("3.running_mean [16]") && Contains("3.running_var [16]") && Contains("3.num_batches_tracked []"));
  CHECK_THAT(msg, Contains("3.weight: file [16], module [16, 16]") &&
                      Contains("4.weight: file [4, 16], module [3, 16]") && Contains("4.bias: file [4], module [3]"));
  CHECK_THAT(msg, Contains("strict: false"));
  check_same_tensors(before, module_state(*m));  // strict: nothing loaded

  LoadWeightsOptions loose;
  loose.strict = false;
  const LoadWeightsReport r = load_weights(*m, file, loose);
  CHECK(r.loaded == 5);
  CHECK(r.missing == std::vector<std::string>{"5.weight", "5.bias"});
  CHECK(r.unexpected == std::vector<std::string>{"3.num_batches_tracked", "3.running_mean", "3.running_var"});
  CHECK(r.mismatched == std::vector<std::string>{"3.weight", "4.weight", "4.bias"});
  const auto file_tensors = load_safetensors(file);
  const auto after = module_state(*m);
  for (const char* loaded : {"0.weight", "0.bias", "1.weight", "1.bias", "3.bias"})
    CHECK(torch::equal(after.at(loaded), file_tensors.at(loaded)));
  for (const char* kept : {"3.weight", "4.weight", "4.bias", "5.weight", "5.bias"})
    CHECK(torch::equal(after.at(kept), before.at(kept)));
}

TEST_CASE("a strict error about hundreds of tensors lists 20 of each kind and counts the rest", "[weights]") {
  struct Many : torch::nn::Module {
    Many() {
      auto list = register_module("layers", torch::nn::ModuleList());
      for (int i = 0; i < 150; ++i) list->push_back(torch::nn::Linear(2, 2));
    }
  } many;
  const std::string msg = checkpoint_error([&] { load_weights(many, kGolden + "foreign_weights.pt"); });
  CHECK_THAT(msg, Contains("300 missing, 11 unexpected"));
  CHECK_THAT(msg,
             Contains("missing (in the module, not in the file) (300): layers.0.weight [2, 2], layers.0.bias [2]"));
  CHECK_THAT(msg, Contains("... and 280 more"));
  CHECK_THAT(msg, Contains("4.bias [4]"));  // all 11 unexpected are listed
  CHECK(msg.size() < 3000);
}

TEST_CASE("prefix selects the file's names under it, and a wrong one is an error, and the error hints at the right one",
          "[weights]") {
  const std::string lightning = kGolden + "foreign_lightning.pt";
  auto m = golden_model();
  // Lightning's names without a prefix: the hint names it.
  const std::string msg = checkpoint_error([&] { load_weights(*m, lightning); });
  CHECK_THAT(msg, Contains("11 missing, 11 unexpected") && Contains("model.0.weight [16, 8]"));
  CHECK_THAT(msg, Contains("pass prefix 'model.'"));
  LoadWeightsOptions o;
  o.prefix = "modle.";
  CHECK_THAT(checkpoint_error([&] { load_weights(*m, lightning, o); }),
             Contains("prefix 'modle.'") && Contains("'model.0.weight'"));
  // The wrapper key spelled out works the same.
  o.prefix = "state_dict.model.";
  CHECK(load_weights(*m, lightning, o).loaded == 11);
  CHECK(output_diff(m) < 1e-6);
  // One layer of the file into a bare Linear.
  torch::nn::Linear first(8, 16);
  o.prefix = "model.0.";
  const auto r = load_weights(*first, lightning, o);
  CHECK(r.loaded == 2);
  CHECK(torch::equal(first->weight, m->named_parameters()["0.weight"]));
  // The module's names longer than the file's: the hint says to load into the submodule.
  struct Outer : torch::nn::Module {
    Outer() { register_module("net", golden_model()); }
  } outer;
  CHECK_THAT(checkpoint_error([&] { load_weights(outer, kGolden + "foreign_weights.pt"); }),
             Contains("with 'net.' in front") && Contains("submodule"));
}

TEST_CASE("a file's other dtype is cast to the module's, and the report says which", "[weights]") {
  const std::string dir = temp_dir("weights-dtype");
  const auto file = load_safetensors(kGolden + "foreign_weights.safetensors");
  std::map<std::string, torch::Tensor> half;
  for (const auto& [k, v] : file) half[k] = v.is_floating_point() ? v.to(torch::kBFloat16) : v.to(torch::kInt);
  save_safetensors(half, dir + "/bf16.safetensors");
  auto m = golden_model();
  const auto r = load_weights(*m, dir + "/bf16.safetensors");
  CHECK(r.loaded == 11);
  REQUIRE(r.converted.size() == 11);
  CHECK_THAT(r.converted[0], Contains("BFloat16 -> Float"));
  for (const auto& [k, v] : module_state(*m)) {
    INFO(k);
    CHECK(v.scalar_type() == file.at(k).scalar_type());  // the module keeps its dtypes
    CHECK(torch::equal(v, half.at(k).to(v.scalar_type())));
  }
  CHECK(output_diff(m) > 1e-6);  // bf16 rounding shows...
  CHECK(output_diff(m) < 0.1);   // ...but the model is the same
  // A double module from the float file: exact.
  auto d = golden_model();
  d->to(torch::kDouble);
  // LibTorch's Module::to(dtype) casts every tensor (Python's only floating ones): the int64 buffer too.
  CHECK(load_weights(*d, kGolden + "foreign_weights.pt").converted.size() == 11);
  torch::NoGradGuard ng;
  CHECK((d->forward(golden().input.to(torch::kDouble)) - golden().output).abs().max().item<double>() < 1e-5);
}

TEST_CASE("save_safetensors writes a module's parameters and buffers, which load back into it", "[weights]") {
  const std::string dir = temp_dir("weights-save");
  auto m = golden_model();
  load_weights(*m, kGolden + "foreign_weights.pt");
  save_safetensors(*m, dir + "/m.safetensors", {{"epoch", "3"}});
  SafetensorsReader r(dir + "/m.safetensors");
  CHECK(r.metadata() == std::map<std::string, std::string>{{"epoch", "3"}, {"format", "pt"}});
  check_same_tensors(module_state(*m), r.read_all());
  auto back = golden_model(123);
  CHECK(load_weights(*back, dir + "/m.safetensors").loaded == 11);
  CHECK(output_diff(back) < 1e-6);
}

TEST_CASE("a volt checkpoint written by the Trainer loads its model's weights, whole or into a submodule",
          "[weights][checkpoint]") {
  const std::string root = temp_dir("weights-trainer");
  torch::manual_seed(0);
  auto trained = std::make_shared<BoringModel>(BoringOptions{32, 32, 2, 0.01, 0.0, /*adam=*/true});
  auto opts = quiet_options(root);
  opts.max_steps = 3;
  Trainer t(opts);
  DataLoaderOptions lo;
  lo.batch_size = 8;
  DataLoader dl(std::make_shared<RandomDataset>(64), lo);
  t.fit(*trained, dl);
  t.save_checkpoint(root + "/full.ckpt");
  t.save_checkpoint(root + "/weights.ckpt", /*weights_only=*/true);

  for (const char* file : {"/full.ckpt", "/weights.ckpt"}) {
    INFO(file);
    torch::manual_seed(1);
    BoringModel fresh(BoringOptions{32, 32, 2});
    const auto r = load_weights(fresh, root + file);
    CHECK(r.format == "volt (full)");
    CHECK(r.loaded == static_cast<int64_t>(trained->named_parameters().size()));
    check_same_tensors(module_state(*trained), module_state(fresh));
  }
  torch::nn::Linear head(32, 2);
  LoadWeightsOptions o;
  o.prefix = "head.";
  CHECK(load_weights(*head, root + "/full.ckpt", o).loaded == 2);
  CHECK(torch::equal(head->weight, trained->head->weight));
  // A model of another size: strict names the tensors and both shapes.
  BoringModel wide(BoringOptions{32, 48, 2});
  CHECK_THAT(checkpoint_error([&] { load_weights(wide, root + "/full.ckpt"); }),
             Contains("block0.linear.weight: file [32, 32], module [48, 32]") && Contains(root + "/full.ckpt"));
}

TEST_CASE("a sharded FSDP checkpoint of 2 ranks loads, and consolidates to a safetensors file of the same tensors",
          "[weights][checkpoint][multirank]") {
  const std::string dir = temp_dir("weights-sharded");
  auto kv = quiet_blocks_kv(dir + "/run");
  kv["adam"] = "true";
  kv["trainer.strategy"] =
      "{name: fsdp, sharding_strategy: FULL_SHARD, state_dict_type: sharded, auto_wrap_policy: {module_types: "
      "[Block]}}";
  kv["trainer.devices"] = "2";
  kv["batch_size"] = "4";
  kv["trainer.enable_checkpointing"] = "true";
  kv["checkpoint_every_n_train_steps"] = "3";
  kv["trainer.max_steps"] = "3";
  REQUIRE(run_worker(args_for(dir + "/o.pt", kv), dir) == 0);
  const WorkerResult part = read_worker_output(dir + "/o.pt");
  const std::string ckpt = dir + "/run/checkpoints/last.ckpt";
  REQUIRE(fs::is_directory(ckpt));

  BoringModel m(BoringOptions{32, 33, 3});
  const auto r = load_weights(m, ckpt);
  CHECK(r.format == "volt (sharded)");
  CHECK(r.loaded == static_cast<int64_t>(part.state.size()));
  check_same_tensors(part.state, module_state(m));

  const std::string st = dir + "/model.safetensors";
  const uint64_t bytes = consolidate_checkpoint(ckpt, st, WeightsFormat::Safetensors);
  CHECK(bytes == fs::file_size(st));
  SafetensorsReader sr(st);
  CHECK(sr.metadata().at("format") == "pt");
  CHECK(sr.metadata().at("global_step") == "3");
  CHECK(sr.metadata().at("consolidated_from") == ckpt);
  check_same_tensors(load_checkpoint_file(ckpt).state_dict, sr.read_all());
  check_same_tensors(part.state, sr.read_all());
  // The same from the full consolidation, and the file loads like any other.
  consolidate_checkpoint(ckpt, dir + "/full.ckpt");
  consolidate_checkpoint(dir + "/full.ckpt", dir + "/from-full.safetensors", WeightsFormat::Safetensors);
  check_same_tensors(sr.read_all(), load_safetensors(dir + "/from-full.safetensors"));
  BoringModel m2(BoringOptions{32, 33, 3});
  CHECK(load_weights(m2, st).loaded == r.loaded);
  check_same_tensors(part.state, module_state(m2));
  // A damaged source writes nothing.
  fs::remove(ckpt + "/COMPLETE");
  CHECK_THROWS_AS(consolidate_checkpoint(ckpt, dir + "/bad.safetensors", WeightsFormat::Safetensors), CheckpointError);
  CHECK_FALSE(fs::exists(dir + "/bad.safetensors"));
}

namespace {

// Reads the volt-written safetensors files with make_foreign_weights.read_safetensors (json +
// struct, every layout check), then:
//   all.safetensors  against expected.txt: "<name> <python dtype> <[shape]> <count> <values...>"
//   model.safetensors  strictly into make_model(); its output on the golden input must match.
const char* const kCheckSafetensors = R"PY(
import json
import sys

sys.dont_write_bytecode = True
import torch

golden_dir, all_path, expected_path, model_path = sys.argv[1:5]
sys.path.insert(0, golden_dir)
from make_foreign_weights import make_model, read_safetensors

errors = []
tensors, metadata, problems = read_safetensors(all_path, sorted_keys=True)
errors += ["all.safetensors: " + p for p in problems]
if metadata != {"format": "pt", "writer": "volt"}:
    errors.append("metadata %r" % (metadata,))
want = {}
for line in open(expected_path):
    f = line.split()
    want[f[0]] = (f[1], json.loads(f[2]), [float(v) for v in f[4:]])
    assert len(want[f[0]][2]) == int(f[3])
if sorted(tensors) != sorted(want):
    errors.append("names %s, expected %s" % (sorted(tensors), sorted(want)))
for name, (dtype, shape, values) in sorted(want.items()):
    t = tensors.get(name)
    if t is None:
        continue
    if str(t.dtype) != dtype or list(t.shape) != shape:
        errors.append("%s: %s %s, expected %s %s" % (name, t.dtype, list(t.shape), dtype, shape))
    elif t.double().reshape(-1).tolist() != values:
        errors.append("%s: values %s, expected %s" % (name, t.double().reshape(-1).tolist()[:6], values[:6]))

weights, metadata, problems = read_safetensors(model_path, sorted_keys=True)
errors += ["model.safetensors: " + p for p in problems]
model = make_model()
model.load_state_dict(weights, strict=True)
model.eval()
golden = json.load(open(golden_dir + "/foreign_weights.json"))
with torch.no_grad():
    out = model(torch.tensor(golden["input"], dtype=torch.float32)).double()
diff = (out - torch.tensor(golden["output"], dtype=torch.float64)).abs().max().item()
print("max |python - golden| =", diff)
if diff > 1e-6:
    errors.append("the model's output differs by %g" % diff)
for e in errors:
    print("MISMATCH:", e)
print("checked %d tensors, %d mismatches" % (len(want), len(errors)))
sys.exit(1 if errors else 0)
)PY";

std::string python_dtype(at::ScalarType t) {
  static const std::map<at::ScalarType, std::string> names = {
      {at::kDouble, "torch.float64"},    {at::kFloat, "torch.float32"}, {at::kHalf, "torch.float16"},
      {at::kBFloat16, "torch.bfloat16"}, {at::kLong, "torch.int64"},    {at::kInt, "torch.int32"},
      {at::kShort, "torch.int16"},       {at::kChar, "torch.int8"},     {at::kByte, "torch.uint8"},
      {at::kBool, "torch.bool"}};
  return names.at(t);
}

}  // namespace

TEST_CASE(
    "safetensors files volt writes are read by a Python reader with equal values, and load into the Python "
    "model",
    "[weights][python]") {
  if (!python_torch_available()) {
    WARN(kPython << " cannot import torch: skipped");
    return;
  }
  const std::string dir = temp_dir("weights-python");
  auto gen = at::detail::createCPUGenerator(3);
  std::map<std::string, torch::Tensor> all = {
      {"f64", torch::randn({2, 3}, gen).to(torch::kDouble)},
      {"f32", torch::randn({3, 4}, gen)},
      {"f16", torch::randn({5}, gen).to(torch::kHalf)},
      {"bf16", torch::randn({2, 3}, gen).to(torch::kBFloat16)},
      {"i64", torch::arange(-4, 5, torch::kLong) * int64_t{1000000007}},
      {"i32", torch::arange(-3, 4, torch::kInt) * 70000},
      {"i16", torch::arange(-3, 3, torch::kShort) * 1000},
      {"i8", torch::arange(-128, 128, 37, torch::kChar)},
      {"u8", torch::arange(0, 256, 51, torch::kByte)},
      {"bool", torch::tensor({true, false, true})},
      {"scalar", torch::tensor(0.125)},
      {"empty", torch::zeros({0, 2})},
      {"odd.u8", torch::arange(3, torch::kByte)},  // an odd length: 1-byte items go last, the rest stay aligned
  };
  save_safetensors(all, dir + "/all.safetensors", {{"format", "pt"}, {"writer", "volt"}});
  {
    std::ofstream out(dir + "/expected.txt");
    out << std::setprecision(17);
    for (const auto& [name, t] : all) {
      const auto d = t.to(torch::kDouble).reshape({-1}).contiguous();
      out << name << " " << python_dtype(t.scalar_type()) << " [";
      for (int64_t i = 0; i < t.dim(); ++i) out << (i ? "," : "") << t.size(i);
      out << "] " << d.numel();
      for (int64_t i = 0; i < d.numel(); ++i) out << " " << d[i].item<double>();
      out << "\n";
    }
  }
  auto m = golden_model();
  load_weights(*m, kGolden + "foreign_weights.pt");
  save_safetensors(*m, dir + "/model.safetensors");
  std::string log;
  const int rc =
      run_python(dir, kCheckSafetensors,
                 {kGolden, dir + "/all.safetensors", dir + "/expected.txt", dir + "/model.safetensors"}, log);
  INFO(log);
  CHECK(rc == 0);
}
