// volt checkpoints read by Python: `torch.load(path, weights_only=True)` (PyTorch 2.6+'s default)
// gives Lightning's dict with the tensors'
// dtypes, shapes and values, and the demo model's state_dict loads strictly into the Python demo
// model (tests/golden/make_demo_golden.py) and computes the same outputs. Skipped where
// /usr/bin/python3 cannot import torch.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "boring_model.h"
#include "volt/callbacks/prediction_writer.h"
#include "volt/checkpoint/checkpoint.h"
#include "volt/checkpoint/state_io.h"
#include "volt/demos/language_model.h"
#include "volt/strategies/strategy.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;

namespace {

const char* const kPython = "/usr/bin/python3";

bool python_torch_available() {
  static const bool ok = [] {
    const std::vector<std::vector<std::string>> argv = {{kPython, "-c", "import torch"}};
    const auto codes = run_processes(argv, {}, 300, temp_dir("py-probe") + "/probe");
    return codes.at(0) == 0;
  }();
  return ok;
}

/// Runs `script` (written into `dir`) with `args`; returns its exit code, with its output in INFO.
int run_python(const std::string& dir, const std::string& script, const std::vector<std::string>& args,
               std::string& output) {
  const std::string file = dir + "/check.py";
  {
    std::ofstream out(file);
    out << script;
  }
  std::vector<std::string> argv = {kPython, file};
  argv.insert(argv.end(), args.begin(), args.end());
  // No __pycache__ in the source tree (the demo test imports tests/golden/make_demo_golden.py).
  std::vector<std::map<std::string, std::string>> env(1);
  env[0]["PYTHONDONTWRITEBYTECODE"] = "1";
  const auto codes = run_processes({argv}, env, 540, dir + "/python");
  output = read_text(dir + "/python.0.log");
  return codes.at(0);
}

std::string python_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return "torch.float32";
    case at::kDouble:
      return "torch.float64";
    case at::kHalf:
      return "torch.float16";
    case at::kBFloat16:
      return "torch.bfloat16";
    case at::kLong:
      return "torch.int64";
    case at::kInt:
      return "torch.int32";
    case at::kShort:
      return "torch.int16";
    case at::kChar:
      return "torch.int8";
    case at::kByte:
      return "torch.uint8";
    case at::kBool:
      return "torch.bool";
    default:
      FAIL("no Python name for dtype " << t);
      return "";
  }
}

/// "[d0,d1,...]"
std::string shape_text(c10::IntArrayRef s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? "," : "") << s[i];
  os << "]";
  return os.str();
}

/// "<count> v0 v1 ..." with every value exact as a double (row-major order of the logical tensor).
std::string values_text(const torch::Tensor& t) {
  const torch::Tensor d = t.detach().to(torch::kDouble).contiguous().reshape({-1});
  std::ostringstream os;
  os << std::setprecision(17) << d.numel();
  auto a = d.accessor<double, 1>();
  for (int64_t i = 0; i < d.numel(); ++i) os << " " << a[i];
  return os.str();
}

// Reads the expected-values file the C++ side writes:
//   epoch <int> / global_step <int> / meta_marker <word>
//   tensor <section> <name> <python dtype> <[shape]> <count> <values...>
// and checks torch.load's dict against it. Exits 1 listing every mismatch.
const char* const kCheckFullCheckpoint = R"PY(
import json
import sys

import torch

path, expected_path = sys.argv[1], sys.argv[2]
ck = torch.load(path, weights_only=True)  # PyTorch 2.6+'s default
errors = []
want = {}
scalars = {}
for line in open(expected_path):
    f = line.split()
    if not f:
        continue
    if f[0] == "tensor":
        section, name, dtype, shape, n = f[1], f[2], f[3], json.loads(f[4]), int(f[5])
        values = [float(v) for v in f[6:]]
        assert len(values) == n, line
        want.setdefault(section, {})[name] = (dtype, shape, values)
    else:
        scalars[f[0]] = f[1]

if not isinstance(ck, dict):
    errors.append("torch.load gave %r, not a dict" % type(ck))
    ck = {}
top = sorted(ck.keys())
expected_top = sorted(["epoch", "global_step", "format_version", "volt_meta", "state_dict", "optimizer_states",
                       "rng_states"])
if top != expected_top:
    errors.append("top-level keys %s, expected %s" % (top, expected_top))
for k in ("epoch", "global_step"):
    if ck.get(k) != int(scalars[k]) or type(ck.get(k)) is not int:
        errors.append("%s is %r, expected %s" % (k, ck.get(k), scalars[k]))
if type(ck.get("format_version")) is not int:
    errors.append("format_version is %r" % (ck.get("format_version"),))
if not isinstance(ck.get("volt_meta"), str) or scalars["meta_marker"] not in ck["volt_meta"]:
    errors.append("volt_meta %r lacks %s" % (ck.get("volt_meta"), scalars["meta_marker"]))
for section, tensors in sorted(want.items()):
    got = ck.get(section)
    if not isinstance(got, dict):
        errors.append("%s is %r, not a dict" % (section, type(got)))
        continue
    if sorted(got.keys()) != sorted(tensors.keys()):
        errors.append("%s keys %s, expected %s" % (section, sorted(got.keys()), sorted(tensors.keys())))
    for name, (dtype, shape, values) in sorted(tensors.items()):
        t = got.get(name)
        where = "%s/%s" % (section, name)
        if not isinstance(t, torch.Tensor):
            errors.append("%s is %r, not a tensor" % (where, type(t)))
            continue
        if str(t.dtype) != dtype:
            errors.append("%s dtype %s, expected %s" % (where, t.dtype, dtype))
        if list(t.shape) != shape:
            errors.append("%s shape %s, expected %s" % (where, list(t.shape), shape))
        if t.device.type != "cpu":
            errors.append("%s on %s" % (where, t.device))
        got_values = t.detach().double().reshape(-1).tolist()
        if got_values != values:
            errors.append("%s values %s, expected %s" % (where, got_values[:8], values[:8]))
for e in errors:
    print("MISMATCH:", e)
print("checked %d tensors, %d mismatches" % (sum(len(t) for t in want.values()), len(errors)))
sys.exit(1 if errors else 0)
)PY";

// Loads the checkpoint's state_dict strictly into Lightning's demo module layout (the Transformer
// as `self.model`, the class from tests/golden/make_demo_golden.py) and compares its eval-mode
// output on the C++ side's tokens with the C++ output.
//   expected file: config <json> / inputs <[shape]> <count> <values> / target ... / output ...
const char* const kCheckDemoModel = R"PY(
import json
import sys

sys.dont_write_bytecode = True
import torch
import torch.nn as nn

path, expected_path, golden_dir = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, golden_dir)
from make_demo_golden import Transformer

rows = {}
for line in open(expected_path):
    f = line.split(" ", 1)
    rows[f[0]] = f[1].strip()
config = json.loads(rows["config"])


def tensor(key, dtype):
    f = rows[key].split()
    shape, n = json.loads(f[0]), int(f[1])
    values = [float(v) for v in f[2:]]
    assert len(values) == n
    return torch.tensor(values, dtype=torch.float64).reshape(shape).to(dtype)


class LightningTransformer(nn.Module):
    """lightning.pytorch.demos.LightningTransformer's parameters: the Transformer as `model`."""

    def __init__(self, **config):
        super().__init__()
        self.model = Transformer(**config)


ck = torch.load(path, weights_only=True)  # PyTorch 2.6+'s default
sd = ck["state_dict"]
module = LightningTransformer(**config)
expected_names = sorted(module.state_dict().keys())
print("missing in the checkpoint:", sorted(set(expected_names) - set(sd)))
print("unexpected in the checkpoint:", sorted(set(sd) - set(expected_names)))
module.load_state_dict(sd, strict=True)  # raises on any name or shape mismatch
bad_dtypes = [k for k, v in sd.items() if v.dtype != torch.float32]
module.eval()

inputs, target = tensor("inputs", torch.int64), tensor("target", torch.int64)
expected = tensor("output", torch.float64)
output = module.model(inputs, target).detach().double()
ok = True
if list(output.shape) != list(expected.shape):
    print("output shape", list(output.shape), "expected", list(expected.shape))
    ok = False
else:
    diff = (output - expected).abs().max().item()
    print("max |python - c++| =", diff)
    ok = diff < 1e-5
# The loaded weights are what makes the outputs agree: a freshly initialised model differs.
torch.manual_seed(0)
fresh = LightningTransformer(**config).eval()
fresh_diff = (fresh.model(inputs, target).detach().double() - expected).abs().max().item()
print("max |fresh python - c++| =", fresh_diff)
if fresh_diff < 1e-3:
    print("a fresh model agrees too: the comparison proves nothing")
    ok = False
if bad_dtypes:
    print("not float32:", bad_dtypes)
    ok = False
sys.exit(0 if ok else 1)
)PY";

// Loads every file given with weights_only=True and compares the tensors the expected-values file
// names: "tensor <file index> <key> <python dtype> <[shape]> <count> <values...>". Exits 1 listing
// every file that does not load and every mismatch.
const char* const kCheckWeightsOnly = R"PY(
import json
import sys

import torch

expected_path, paths = sys.argv[1], sys.argv[2:]
want = {}
for line in open(expected_path):
    f = line.split()
    if f and f[0] == "tensor":
        want.setdefault(int(f[1]), {})[f[2]] = (f[3], json.loads(f[4]), [float(v) for v in f[6:]])
errors = []
for i, path in enumerate(paths):
    try:
        d = torch.load(path, weights_only=True)
    except Exception as e:
        errors.append("%s does not load with weights_only=True: %s" % (path, str(e).strip().splitlines()[-1]))
        continue
    print("loads with weights_only=True:", path, sorted(d.keys())[:8])
    for key, (dtype, shape, values) in sorted(want.get(i, {}).items()):
        t = d.get(key)
        where = "%s[%s]" % (path, key)
        if not isinstance(t, torch.Tensor):
            errors.append("%s is %r, not a tensor" % (where, type(t)))
        elif str(t.dtype) != dtype or list(t.shape) != shape or t.double().reshape(-1).tolist() != values:
            errors.append("%s is %s %s, expected %s %s" % (where, t.dtype, list(t.shape), dtype, shape))
    if i in want and sorted(d.keys()) != sorted(want[i].keys()):
        errors.append("%s keys %s, expected %s" % (path, sorted(d.keys()), sorted(want[i].keys())))
for e in errors:
    print("MISMATCH:", e)
sys.exit(1 if errors else 0)
)PY";

/// predict_step: the forward pass, a named field and a nested one (every key form of the files).
class NamedPredict : public BoringModel {
 public:
  Batch predict_step(const Batch& batch, int64_t) override {
    auto y = forward(batch[0]);
    Batch out{y};
    out.set("argmax", y.argmax(1));
    out.set("extra", Batch{}.set("mask", y > 0));
    return out;
  }
};

}  // namespace

TEST_CASE("torch.load in Python reads a volt checkpoint: Lightning's keys, dtypes, shapes and values",
          "[checkpoint][python]") {
  if (!python_torch_available()) {
    WARN(kPython << " cannot import torch: skipped");
    return;
  }
  const std::string dir = temp_dir("py-load");
  const std::string path = dir + "/model.ckpt";
  auto gen = at::detail::createCPUGenerator(77);
  Checkpoint c;
  c.epoch = 4;
  c.global_step = 1234;
  c.state_dict["layer.weight"] = torch::randn({4, 3}, gen);
  c.state_dict["layer.bias"] = torch::randn({4}, gen);
  c.state_dict["dbl"] = torch::randn({2, 3}, gen).to(torch::kDouble);
  c.state_dict["bf16"] = torch::randn({6}, gen).to(torch::kBFloat16);
  c.state_dict["half"] = torch::randn({3}, gen).to(torch::kHalf);
  c.state_dict["ids"] = torch::arange(-3, 9, torch::kLong).reshape({3, 4}) * int64_t{1000003};
  c.state_dict["int32"] = torch::arange(5, torch::kInt);
  c.state_dict["mask"] = torch::tensor({true, false, true, true});
  c.state_dict["scalar"] = torch::tensor(-1.25);
  c.state_dict["empty"] = torch::zeros({0, 3});
  c.state_dict["transposed"] = torch::randn({2, 5}, gen).t();  // not contiguous
  c.optimizer_state["layer.weight.exp_avg"] = torch::randn({4, 3}, gen);
  c.optimizer_state["layer.weight.step"] = torch::tensor(9, torch::kLong);
  c.rng_states["rank0.cpu"] = at::detail::getDefaultCPUGenerator().get_state();
  c.meta["extra"]["marker"] = "hello-from-volt";
  save_checkpoint_file(c, path);

  const std::string expected = dir + "/expected.txt";
  {
    std::ofstream out(expected);
    out << "epoch " << c.epoch << "\nglobal_step " << c.global_step << "\nmeta_marker hello-from-volt\n";
    for (const auto& [section, tensors] :
         std::vector<std::pair<const char*, const std::map<std::string, torch::Tensor>*>>{
             {kModelSection, &c.state_dict}, {kOptimizerSection, &c.optimizer_state}, {kRngSection, &c.rng_states}})
      for (const auto& [name, t] : *tensors)
        out << "tensor " << section << " " << name << " " << python_dtype(t.scalar_type()) << " "
            << shape_text(t.sizes()) << " " << values_text(t) << "\n";
  }
  std::string output;
  const int rc = run_python(dir, kCheckFullCheckpoint, {path, expected}, output);
  INFO(output);
  CHECK(rc == 0);
}

TEST_CASE("the demo model's checkpoint loads strictly into the Python demo model and gives the same outputs",
          "[checkpoint][python][demos]") {
  if (!python_torch_available()) {
    WARN(kPython << " cannot import torch: skipped");
    return;
  }
  const std::string dir = temp_dir("py-demo");
  const std::string path = dir + "/demo.ckpt";
  demos::LanguageModelOptions o;
  o.vocab_size = 50;
  o.ninp = 16;
  o.nhead = 2;
  o.nhid = 32;
  o.nlayers = 2;
  o.dropout = 0.2;
  torch::manual_seed(321);
  demos::LanguageModel lm(o);
  lm.configure_model();
  lm.eval();
  // Lightning's names: the Transformer is the module's `model`.
  REQUIRE(lm.named_parameters().contains("model.embedding.weight"));
  const torch::Tensor inputs = (torch::arange(27, torch::kLong) * 7 + 3).remainder(50).reshape({3, 9});
  const torch::Tensor target = (torch::arange(27, torch::kLong) * 11 + 5).remainder(50).reshape({3, 9});
  torch::Tensor output;
  {
    torch::NoGradGuard ng;
    output = lm.forward(inputs, target);
  }
  REQUIRE(output.sizes().vec() == std::vector<int64_t>{27, 50});

  // Saved as the Trainer saves: through the strategy.
  SingleDeviceStrategy s(Precision("32-true", "cpu"), "cpu");
  Checkpoint header;
  header.epoch = 1;
  header.global_step = 10;
  s.save_checkpoint(lm, {}, header, path);

  const std::string expected = dir + "/expected.txt";
  {
    std::ofstream out(expected);
    out << "config {\"vocab_size\": " << o.vocab_size << ", \"ninp\": " << o.ninp << ", \"nhead\": " << o.nhead
        << ", \"nhid\": " << o.nhid << ", \"nlayers\": " << o.nlayers << ", \"dropout\": " << o.dropout << "}\n";
    out << "inputs " << shape_text(inputs.sizes()) << " " << values_text(inputs) << "\n";
    out << "target " << shape_text(target.sizes()) << " " << values_text(target) << "\n";
    out << "output " << shape_text(output.sizes()) << " " << values_text(output) << "\n";
  }
  std::string log;
  const int rc =
      run_python(dir, kCheckDemoModel, {path, expected, std::string(VOLT_SOURCE_DIR) + "/tests/golden"}, log);
  INFO(log);
  CHECK(rc == 0);
}

TEST_CASE("every file volt writes for torch.load loads with weights_only=True: predictions and checkpoints",
          "[checkpoint][python][prediction]") {
  if (!python_torch_available()) {
    WARN(kPython << " cannot import torch: skipped");
    return;
  }
  const std::string dir = temp_dir("py-weights-only");
  torch::manual_seed(5);
  NamedPredict m;
  // Predictions as PredictionWriter writes them: one file per batch and the epoch file.
  PredictionWriterOptions wo;
  wo.output_dir = dir + "/pred";
  wo.write_interval = "batch_and_epoch";
  DataLoader loader(std::make_shared<RandomDataset>(10), DataLoaderOptions{.batch_size = 4});
  Trainer t(quiet_options(dir), {std::make_shared<PredictionWriter>(wo)});
  const std::vector<Batch> outputs = t.predict(m, loader);
  REQUIRE(outputs.size() == 3);
  std::vector<std::string> files;
  std::ofstream expected(dir + "/expected.txt");
  auto expect = [&](size_t file, const std::string& key, const torch::Tensor& v) {
    expected << "tensor " << file << " " << key << " " << python_dtype(v.scalar_type()) << " " << shape_text(v.sizes())
             << " " << values_text(v) << "\n";
  };
  for (size_t b = 0; b < outputs.size(); ++b) {
    const std::string where = "dataloader_0/batch_" + std::to_string(b);
    files.push_back(wo.output_dir + "/rank_0/" + where + ".pt");
    const torch::Tensor idx = torch::arange(static_cast<int64_t>(4 * b), std::min<int64_t>(4 * b + 4, 10));
    for (const auto& [key, v] :
         std::vector<std::pair<std::string, torch::Tensor>>{{"0", outputs[b][0]},
                                                            {"argmax", outputs[b].at("argmax")},
                                                            {"extra.mask", outputs[b].child("extra").at("mask")},
                                                            {"sample_indices", idx}}) {
      expect(files.size() - 1, key, v);
      expect(outputs.size(), where + "/" + key, v);  // the epoch file, listed after the batch files
    }
  }
  files.push_back(wo.output_dir + "/rank_0.pt");
  // Checkpoints: a full one (the Trainer's save), a sharded folder's rank file, and its consolidation.
  SingleDeviceStrategy s(Precision("32-true", "cpu"), "cpu");
  Checkpoint header;
  header.global_step = 3;
  s.save_checkpoint(m, {}, header, dir + "/full.ckpt");
  save_state(s.state_layout(m, {}), CheckpointHeader{}, dir + "/sharded", CheckpointFormat::Sharded, s.state_comm());
  consolidate_checkpoint(dir + "/sharded", dir + "/consolidated.ckpt");
  for (const std::string f : {"/full.ckpt", "/sharded/rank_00000.ckpt", "/consolidated.ckpt"}) files.push_back(dir + f);
  expected.close();

  std::vector<std::string> args = {dir + "/expected.txt"};
  args.insert(args.end(), files.begin(), files.end());
  std::string output;
  const int rc = run_python(dir, kCheckWeightsOnly, args, output);
  INFO(output);
  CHECK(rc == 0);
  CHECK_THAT(output, Catch::Matchers::Contains("rank_0.pt") && Catch::Matchers::Contains("consolidated.ckpt"));
}
