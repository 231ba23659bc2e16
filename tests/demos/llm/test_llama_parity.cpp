// LlamaLM against the plain-PyTorch reference (demos/llm/reference/llama_ref.py, driven by
// tests/demos/llm/parity.py): from the reference's initial weights (torch.save, loaded by name) and
// on its 20 fixed global batches, volt's training on one process, with DDP on 2 processes and with
// FSDP on 2 processes (tied embeddings, the decoder layers wrapped) gives the reference's
// single-process losses to 1e-5 (AdamW with two param groups, warm-up + cosine, clipping at 1.0);
// volt's state_dict exported as safetensors loads strictly into the reference and gives volt's
// logits, and the reference's torch.save state_dict loads into volt and gives the reference's.
// Skipped where /usr/bin/python3 cannot import torch.
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "boring_model.h"
#include "volt/checkpoint/safetensors.h"
#include "volt/checkpoint/torch_save.h"
#include "volt/checkpoint/weights.h"
#include "volt/core/options.h"
#include "volt/demos/llm/llama_lm.h"

using namespace volt;
using namespace volt::testing;

namespace {

const char* const kPython = "/usr/bin/python3";
const std::string kParity = std::string(VOLT_SOURCE_DIR) + "/tests/demos/llm/parity.py";
constexpr int64_t kSteps = 20;

bool python_torch_available() {
  static const bool ok = [] {
    const auto codes = run_processes({{kPython, "-c", "import torch"}}, {}, 300, temp_dir("py-probe") + "/probe");
    return codes.at(0) == 0;
  }();
  return ok;
}

/// The model section both sides read (LlamaLMOptions keys = parity.py's model and optimizer keys).
std::map<std::string, std::string> model_keys(bool tied) {
  return {{"vocab_size", "128"},
          {"hidden_size", "64"},
          {"num_hidden_layers", "2"},
          {"num_attention_heads", "4"},
          {"num_key_value_heads", "2"},
          {"tie_word_embeddings", tied ? "true" : "false"},
          {"lr", "0.003"},
          {"weight_decay", "0.1"},
          {"beta1", "0.9"},
          {"beta2", "0.95"},
          {"eps", "1e-8"},
          {"warmup_steps", "3"},
          {"min_lr_ratio", "0.1"}};  // lr_decay_steps 0: trainer.max_steps (20), as parity.py's steps
}

std::string flow(const std::map<std::string, std::string>& kv) {
  std::string s = "{";
  for (const auto& [k, v] : kv) s += (s.size() > 1 ? ", " : "") + k + ": " + v;
  return s + "}";
}

std::string python_config(bool tied) {
  auto kv = model_keys(tied);
  kv.insert(
      {{"batch_size", "4"}, {"block_size", "32"}, {"steps", std::to_string(kSteps)}, {"gradient_clip_val", "1.0"}});
  return flow(kv);
}

int run_python(const std::vector<std::string>& args, const std::string& log_prefix, std::string& output) {
  std::vector<std::string> argv = {kPython, kParity};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<std::map<std::string, std::string>> env(1);
  env[0]["PYTHONDONTWRITEBYTECODE"] = "1";
  const auto codes = run_processes({argv}, env, 300, log_prefix);
  output = read_text(log_prefix + ".0.log");
  return codes.at(0);
}

std::vector<double> doubles(const torch::Tensor& t) {
  const auto d = t.to(torch::kDouble).contiguous();
  return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

std::map<std::string, torch::Tensor> read_torch_save(const std::string& path) {
  TorchSaveReader r(path);
  std::map<std::string, torch::Tensor> out;
  for (const auto& n : r.names()) out[n] = r.read(n);
  return out;
}

/// parity.py make's output for one config: the folder, the losses and the final state_dict.
struct Reference {
  std::string dir;
  std::vector<double> losses;
  std::map<std::string, torch::Tensor> final_state;
};

const Reference& reference(bool tied) {
  static std::map<bool, Reference> made;
  auto it = made.find(tied);
  if (it != made.end()) return it->second;
  Reference r;
  r.dir = temp_dir(tied ? "llama-ref-tied" : "llama-ref");
  std::string out;
  const int code = run_python({"make", "--config", python_config(tied), "--out", r.dir}, r.dir + "/make", out);
  INFO(out);
  REQUIRE(code == 0);
  r.losses = doubles(TorchSaveReader(r.dir + "/result.pt").read("losses"));
  r.final_state = read_torch_save(r.dir + "/final.pt");
  REQUIRE(r.losses.size() == static_cast<size_t>(kSteps));
  return made.emplace(tied, std::move(r)).first->second;
}

/// volt's run through the test worker: rank 0's per-step losses (averaged over ranks) and the final
/// state_dict it exported as safetensors.
struct VoltRun {
  std::vector<double> losses;
  std::map<std::string, torch::Tensor> final_state;
  std::string safetensors;
};

VoltRun run_volt(const Reference& ref, bool tied, const std::string& tag, int devices, const std::string& strategy) {
  const std::string cfg = ref.dir + "/" + tag + ".yaml";
  std::ofstream(cfg) << "dir: " << ref.dir << "\ntag: " << tag << "\nmodel: " << flow(model_keys(tied))
                     << "\ntrainer: {accelerator: cpu, devices: " << devices << ", strategy: " << strategy
                     << ", max_steps: " << kSteps
                     << ", gradient_clip_val: 1.0, enable_progress_bar: false, enable_model_summary: false, "
                        "enable_checkpointing: false, logger: false, num_sanity_val_steps: 0, default_root_dir: "
                     << ref.dir << "/" << tag << "}\n";
  const auto codes = run_processes({{VOLT_TEST_WORKER, "--llama_parity=" + cfg}}, {}, 400, ref.dir + "/" + tag);
  INFO(read_text(ref.dir + "/" + tag + ".0.log"));
  REQUIRE(codes.at(0) == 0);
  VoltRun r;
  std::ifstream in(ref.dir + "/" + tag + ".losses");
  for (double v; in >> v;) r.losses.push_back(v);
  r.safetensors = ref.dir + "/" + tag + ".safetensors";
  r.final_state = load_safetensors(r.safetensors);
  return r;
}

double max_loss_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

double max_state_diff(const std::map<std::string, torch::Tensor>& a, const std::map<std::string, torch::Tensor>& b) {
  std::vector<std::string> ka, kb;
  for (const auto& kv : a) ka.push_back(kv.first);
  for (const auto& kv : b) kb.push_back(kv.first);
  CHECK(ka == kb);  // the names; the values of those in both are compared below
  double m = 0;
  for (const auto& [k, v] : a) {
    if (!b.count(k)) continue;
    REQUIRE(v.sizes() == b.at(k).sizes());
    m = std::max(m, (v.to(torch::kDouble) - b.at(k).to(torch::kDouble)).abs().max().item<double>());
  }
  return m;
}

/// A LlamaLM of `tied`'s config with the weights in `path` (strict, by name).
std::unique_ptr<demos::LlamaLM> volt_model(bool tied, const std::string& path) {
  YAML::Node node = YAML::Load(flow(model_keys(tied)));
  auto m = std::make_unique<demos::LlamaLM>(options_from_yaml<demos::LlamaLMOptions>(node, "model"));
  m->configure_model();
  const auto report = load_weights(*m, path);
  CHECK(report.missing.empty());
  CHECK(report.unexpected.empty());
  CHECK(report.loaded == static_cast<int64_t>(m->named_parameters().size()));
  m->eval();
  return m;
}

/// Loads `weights` into the reference (parity.py load) and compares its logits of its fixed input
/// with volt's from the same file; returns the largest difference.
double reference_vs_volt_logits(bool tied, const std::string& weights, const std::string& dir) {
  std::string out;
  std::filesystem::create_directories(dir);
  const std::string logits_file = dir + "/logits.pt";
  const int code = run_python({"load", "--config", python_config(tied), "--weights", weights, "--out", logits_file},
                              dir + "/load", out);
  INFO(out);
  REQUIRE(code == 0);
  TorchSaveReader r(logits_file);
  const auto ids = r.read("input_ids"), ref_logits = r.read("logits");
  auto m = volt_model(tied, weights);
  torch::NoGradGuard ng;
  const auto logits = m->forward(ids);
  REQUIRE(logits.sizes() == ref_logits.sizes());
  CHECK(ref_logits.abs().max().item<double>() > 0.1);  // not a degenerate comparison
  return (logits.to(torch::kDouble) - ref_logits.to(torch::kDouble)).abs().max().item<double>();
}

/// Trains volt (`devices` ranks under `strategy`) and checks it against the reference.
void check_training(bool tied, const std::string& tag, int devices, const std::string& strategy) {
  if (!python_torch_available()) {
    WARN("/usr/bin/python3 cannot import torch: skipped");
    return;
  }
  const Reference& ref = reference(tied);
  const VoltRun run = run_volt(ref, tied, tag, devices, strategy);
  REQUIRE(run.losses.size() == ref.losses.size());
  CHECK(ref.losses.front() - ref.losses.back() > 0.3);  // the batches teach something: a real trajectory
  const double loss_diff = max_loss_diff(run.losses, ref.losses);
  CAPTURE(tag, run.losses, ref.losses);
  CHECK(loss_diff <= 1e-5);
  // The final weights, under the reference's names (a tied lm_head under both), agree too.
  const double weight_diff = max_state_diff(run.final_state, ref.final_state);
  CHECK(weight_diff <= 1e-4);
  if (tied && run.final_state.count("lm_head.weight"))
    CHECK(torch::equal(run.final_state.at("lm_head.weight"), run.final_state.at("model.embed_tokens.weight")));
  // What this strategy exported loads into the reference by name and computes volt's logits.
  const double logit_diff = reference_vs_volt_logits(tied, run.safetensors, ref.dir + "/" + tag + "-load");
  CHECK(logit_diff <= 1e-5);
}

}  // namespace

TEST_CASE("LlamaLM on one process trains as the PyTorch reference does", "[llm][parity]") {
  check_training(false, "single", 1, "single_device");
}

TEST_CASE("LlamaLM with tied embeddings on one process trains as the PyTorch reference does", "[llm][parity]") {
  check_training(true, "single-tied", 1, "single_device");
}

TEST_CASE("LlamaLM under DDP on 2 processes trains as the single-process PyTorch reference",
          "[llm][parity][multirank]") {
  check_training(false, "ddp", 2, "ddp");
}

TEST_CASE("LlamaLM with tied embeddings under FSDP on 2 processes trains as the single-process PyTorch reference",
          "[llm][parity][multirank]") {
  check_training(true, "fsdp-tied", 2,
                 "{name: fsdp, sharding_strategy: FULL_SHARD, auto_wrap_policy: {module_types: [LlamaDecoderLayer]}}");
}

TEST_CASE("LlamaLM under FSDP with the embedding and lm_head as units keeps a tied weight in their common ancestor",
          "[llm][parity][multirank][tied]") {
  // Each of Embedding and LMHead alone would shard the tied weight and free it while the other
  // reads it; it belongs to the root unit, the modules' common ancestor (as in FSDP2).
  check_training(true, "fsdp-tied-units", 2,
                 "{name: fsdp, sharding_strategy: FULL_SHARD, auto_wrap_policy: {module_types: [LlamaDecoderLayer, "
                 "Embedding, LMHead]}}");
}

TEST_CASE("the reference's torch.save state_dict loads into LlamaLM by name and gives the reference's logits",
          "[llm][parity]") {
  if (!python_torch_available()) {
    WARN("/usr/bin/python3 cannot import torch: skipped");
    return;
  }
  for (bool tied : {false, true}) {
    DYNAMIC_SECTION((tied ? "tied" : "untied")) {
      const Reference& ref = reference(tied);
      // Trained weights: no norm weight is still 1, so a name mix-up would show.
      const std::string dir = temp_dir("llama-pt-load");
      CHECK(reference_vs_volt_logits(tied, ref.dir + "/final.pt", dir) <= 1e-5);
    }
  }
}

TEST_CASE("the reference refuses a safetensors file that lacks a tensor, naming it", "[llm][parity]") {
  if (!python_torch_available()) {
    WARN("/usr/bin/python3 cannot import torch: skipped");
    return;
  }
  const Reference& ref = reference(false);
  auto state = ref.final_state;
  state.erase("model.layers.1.mlp.up_proj.weight");
  const std::string dir = temp_dir("llama-st-missing");
  save_safetensors(state, dir + "/partial.safetensors", {{"format", "pt"}});
  std::string out;
  const int code = run_python({"load", "--config", python_config(false), "--weights", dir + "/partial.safetensors",
                               "--out", dir + "/logits.pt"},
                              dir + "/load", out);
  CHECK(code == 1);
  CHECK_THAT(out, Catch::Matchers::Contains("model.layers.1.mlp.up_proj.weight"));
}
