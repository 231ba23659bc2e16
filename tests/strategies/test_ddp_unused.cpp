// DDP's parameters without a gradient: find_unused_parameters, static_graph, and
// gradient_as_bucket_view, against single-process training.
#include <malloc.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "distributed/multi_rank.h"
#include "volt/strategies/ddp.h"

using namespace volt;
using namespace volt::testing;

// Each rank is this test binary running the hidden test case "[ddp_scenario]" under a simulated
// torchrun environment; the single-process reference trains the same model on the union of the
// ranks' batches, computing each rank's share of the loss as that rank would.

namespace {

/// Which optional branches the model has: `never` gets no gradient on any rank, `rank0` only on
/// rank 0, `late` only from micro-step `late_from` on.
struct UnusedSpec {
  bool never = false;
  bool rank0 = false;
  int64_t late_from = -1;
  int64_t width = 8;
  int64_t depth = 1;  // Linear layers in the trunk
};

class UnusedModel : public LightningModule {
 public:
  explicit UnusedModel(UnusedSpec s) : LightningModule("UnusedModel"), spec_(s) {
    const int64_t w = s.width;
    trunk = register_module("trunk", torch::nn::Linear(w, w));
    for (int64_t i = 1; i < s.depth; ++i)
      deep.push_back(register_module("deep" + std::to_string(i), torch::nn::Linear(w, w)));
    if (s.never) never = register_module("never", torch::nn::Linear(w, w));
    if (s.rank0) rank0 = register_module("rank0", torch::nn::Linear(w, w));
    if (s.late_from >= 0) late = register_module("late", torch::nn::Linear(w, w));
    head = register_module("head", torch::nn::Linear(w, 1));
  }
  torch::Tensor loss_of(const torch::Tensor& x, int64_t rank, int64_t micro_step) {
    auto h = torch::tanh(trunk->forward(x));
    for (auto& d : deep) h = torch::tanh(d->forward(h));
    if (spec_.rank0 && rank == 0) h = h + torch::tanh(rank0->forward(h));
    if (spec_.late_from >= 0 && micro_step >= spec_.late_from) h = h + torch::tanh(late->forward(h));
    auto out = head->forward(h);
    return torch::mse_loss(out, torch::ones_like(out));
  }
  torch::Tensor training_step(const Batch& b, int64_t) override {
    auto loss = loss_of(b[0], trainer()->global_rank(), micro_step_++);
    losses.push_back(loss.item<double>());
    return loss;
  }
  Optimizers configure_optimizers() override {
    OptimizerConfig c;
    c.optimizer = std::make_shared<torch::optim::SGD>(parameters(),
                                                      torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(0.01));
    return c;
  }
  torch::nn::Linear trunk{nullptr}, never{nullptr}, rank0{nullptr}, late{nullptr}, head{nullptr};
  std::vector<torch::nn::Linear> deep;
  std::vector<double> losses;

 private:
  UnusedSpec spec_;
  int64_t micro_step_ = 0;
};

constexpr int64_t kScenarioSamples = 32, kScenarioBatch = 4;

std::shared_ptr<RandomDataset> scenario_data(int64_t width) {
  return std::make_shared<RandomDataset>(kScenarioSamples, width, 5);
}

UnusedSpec spec_from(const YAML::Node& n) {
  UnusedSpec s;
  if (n["never"]) s.never = n["never"].as<bool>();
  if (n["rank0"]) s.rank0 = n["rank0"].as<bool>();
  if (n["late_from"]) s.late_from = n["late_from"].as<int64_t>();
  if (n["width"]) s.width = n["width"].as<int64_t>();
  if (n["depth"]) s.depth = n["depth"].as<int64_t>();
  return s;
}

struct ScenarioResult {
  std::map<std::string, torch::Tensor> state;
  std::map<std::string, int64_t> grad_steps;  // optimizer steps at which the parameter had a gradient
  int64_t steps = 0;
  int64_t view_steps = 0;  // optimizer steps at which every gradient lay in a DDP bucket
  double peak_bytes = -1;  // VmHWM growth from before the Trainer to the end of fit
  std::vector<double> losses;
  std::string error;
};

/// At each optimizer step: which parameters have a gradient, and whether they are bucket views.
class GradProbe : public Callback {
 public:
  std::string state_key() const override { return "GradProbe"; }
  void on_before_optimizer_step(Trainer& t, LightningModule& m, torch::optim::Optimizer&) override {
    ++result.steps;
    auto* ddp = dynamic_cast<DDPStrategy*>(&t.strategy());
    bool all_views = ddp != nullptr;
    for (auto& kv : m.named_parameters()) {
      const torch::Tensor& g = kv.value().grad();
      result.grad_steps[kv.key()] += g.defined() ? 1 : 0;
      if (!g.defined() || !ddp) continue;
      bool in_bucket = false;
      for (auto& b : ddp->bucket_tensors()) in_bucket = in_bucket || (b.defined() && g.is_alias_of(b));
      all_views = all_views && in_bucket;
    }
    result.view_steps += all_views ? 1 : 0;
  }
  ScenarioResult result;
};

double status_bytes(const std::string& key) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key, 0) == 0) return std::stod(line.substr(key.size())) * 1024.0;
  return -1;
}

void write_result(const std::string& path, const ScenarioResult& r) {
  c10::Dict<std::string, at::Tensor> sd;
  for (auto& [k, v] : r.state) sd.insert(k, v);
  c10::Dict<std::string, int64_t> gs;
  for (auto& [k, v] : r.grad_steps) gs.insert(k, v);
  c10::impl::GenericDict out(c10::StringType::get(), c10::AnyType::get());
  out.insert("state", c10::impl::toGenericDict(sd));
  out.insert("grad_steps", c10::impl::toGenericDict(gs));
  out.insert("steps", r.steps);
  out.insert("view_steps", r.view_steps);
  out.insert("peak_bytes", r.peak_bytes);
  out.insert("losses", torch::tensor(r.losses, torch::kDouble));
  out.insert("error", r.error);
  auto bytes = torch::pickle_save(out);
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

ScenarioResult read_result(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ScenarioResult r;
  r.error = "no result file " + path;
  if (bytes.empty()) return r;
  auto d = torch::pickle_load(bytes).toGenericDict();
  for (const auto& kv : d.at("state").toGenericDict()) r.state[kv.key().toStringRef()] = kv.value().toTensor();
  for (const auto& kv : d.at("grad_steps").toGenericDict()) r.grad_steps[kv.key().toStringRef()] = kv.value().toInt();
  r.steps = d.at("steps").toInt();
  r.view_steps = d.at("view_steps").toInt();
  r.peak_bytes = d.at("peak_bytes").toDouble();
  auto l = d.at("losses").toTensor();
  for (int64_t i = 0; i < l.numel(); ++i) r.losses.push_back(l[i].item<double>());
  r.error = d.at("error").toStringRef();
  return r;
}

/// Runs `world` ranks of the scenario: `config` is a YAML map with the UnusedSpec keys, `trainer`
/// (TrainerOptions, devices and quiet defaults added) and `mmap` (large blocks from mmap, for
/// memory readings). Returns each rank's result.
std::vector<ScenarioResult> run_scenario(const std::string& dir, const std::string& config, int world,
                                         double* seconds = nullptr) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const int port = volt::detail::find_free_port();
  std::vector<std::vector<std::string>> argvs;
  std::vector<std::map<std::string, std::string>> envs;
  for (int r = 0; r < world; ++r) {
    argvs.push_back({self, "[ddp_scenario]"});
    envs.push_back(torchrun_env(r, world, port, {{"VOLT_DDP_SCENARIO", config}, {"VOLT_DDP_SCENARIO_ROOT", dir}}));
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto codes = run_processes(argvs, envs, 180, dir + "/rank");
  if (seconds) *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string logs;
  for (int r = 0; r < world; ++r) logs += read_text(dir + "/rank." + std::to_string(r) + ".log");
  INFO(logs);
  REQUIRE(codes == std::vector<int>(world, 0));
  std::vector<ScenarioResult> out;
  for (int r = 0; r < world; ++r) out.push_back(read_result(dir + "/result." + std::to_string(r)));
  return out;
}

/// The same training in one process: every optimizer step sees the mean of the ranks' losses on
/// their DistributedSampler shares, each computed with that rank's branches.
ScenarioResult train_reference(const UnusedSpec& spec, int world, int64_t accumulate, int64_t epochs,
                               std::vector<std::vector<double>>* rank_losses = nullptr) {
  torch::manual_seed(7);
  UnusedModel m(spec);
  auto opt = m.configure_optimizers()[0].optimizer;
  auto data = scenario_data(spec.width);
  std::vector<DataLoader> loaders;
  for (int r = 0; r < world; ++r) {
    loaders.emplace_back(data, DataLoaderOptions{kScenarioBatch, false, false, 0});
    loaders.back().set_distributed(r, world);
  }
  const int64_t n = loaders[0].num_batches();
  ScenarioResult res;
  if (rank_losses) rank_losses->assign(world, {});
  int64_t micro = 0;
  for (int64_t e = 0; e < epochs; ++e) {
    for (int64_t i = 0; i < n; ++i, ++micro) {
      torch::Tensor total;
      for (int r = 0; r < world; ++r) {
        auto l = m.loss_of(loaders[r].batch(i)[0], r, micro);
        if (rank_losses) (*rank_losses)[r].push_back(l.item<double>());
        total = total.defined() ? total + l : l;
      }
      (total / static_cast<double>(world * accumulate)).backward();
      if ((i + 1) % accumulate != 0 && i + 1 != n) continue;
      ++res.steps;
      for (auto& kv : m.named_parameters()) res.grad_steps[kv.key()] += kv.value().grad().defined() ? 1 : 0;
      opt->step();
      for (auto& p : m.parameters()) p.mutable_grad() = torch::Tensor();
    }
  }
  for (auto& kv : m.named_parameters()) res.state[kv.key()] = kv.value().detach().clone();
  return res;
}

std::string scenario_yaml(const std::string& spec, const std::string& strategy, int64_t accumulate = 1) {
  return "{" + spec + (spec.empty() ? "" : ", ") +
         "trainer: {max_epochs: 2, accumulate_grad_batches: " + std::to_string(accumulate) + ", strategy: " + strategy +
         "}}";
}

/// Every rank's losses, gradients seen and final weights against the single-process reference.
void check_ranks_match_reference(const std::vector<ScenarioResult>& ranks, const UnusedSpec& spec, int64_t accumulate) {
  std::vector<std::vector<double>> losses;
  const ScenarioResult ref = train_reference(spec, static_cast<int>(ranks.size()), accumulate, 2, &losses);
  for (size_t r = 0; r < ranks.size(); ++r) {
    const ScenarioResult& ddp = ranks[r];
    INFO("rank " << r << ": " << ddp.error);
    REQUIRE(ddp.error.empty());
    CHECK(ddp.steps == ref.steps);
    CHECK(ddp.grad_steps == ref.grad_steps);
    REQUIRE(ddp.losses.size() == losses[r].size());
    for (size_t i = 0; i < ddp.losses.size(); ++i) CHECK(ddp.losses[i] == Approx(losses[r][i]).epsilon(1e-5));
    CHECK(max_state_diff(ddp.state, ref.state) < 1e-5);
  }
}

}  // namespace

TEST_CASE("DDP scenario rank (started by the tests below)", "[.][ddp_scenario]") {
  const char* config = std::getenv("VOLT_DDP_SCENARIO");
  const char* root = std::getenv("VOLT_DDP_SCENARIO_ROOT");
  if (!config || !root) return;
  YAML::Node cfg = YAML::Load(config);
  const UnusedSpec spec = spec_from(cfg);
  if (cfg["mmap"] && cfg["mmap"].as<bool>()) {
    // Large blocks from mmap and back to the OS when freed: the resident peak follows live tensors.
    ::mallopt(M_MMAP_THRESHOLD, 256 * 1024);
    ::mallopt(M_TRIM_THRESHOLD, 1024 * 1024);
  }
  TrainerOptions t = options_from_yaml<TrainerOptions>(cfg["trainer"], "trainer");
  t.default_root_dir = root;
  t.enable_progress_bar = false;
  t.enable_model_summary = false;
  t.enable_checkpointing = false;
  t.num_sanity_val_steps = 0;
  t.logger = false;
  t.devices = static_cast<int64_t>(std::stoll(std::getenv("WORLD_SIZE")));
  torch::manual_seed(7);
  UnusedModel model(spec);
  DataLoader loader(scenario_data(spec.width), DataLoaderOptions{kScenarioBatch, false, false, 0});
  auto probe = std::make_shared<GradProbe>();
  ScenarioResult r;
  // The resident peak from here on (where the kernel lets it be reset).
  if (FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", f);
    std::fclose(f);
  }
  const double base = status_bytes("VmRSS:");
  try {
    Trainer trainer(t, {probe});
    trainer.fit(model, loader);
    r = probe->result;
    r.peak_bytes = status_bytes("VmHWM:") - base;
    for (auto& kv : model.named_parameters()) r.state[kv.key()] = kv.value().detach().clone();
  } catch (const volt::Error& e) {
    r = probe->result;
    r.error = e.what();
  }
  r.losses = model.losses;
  write_result(std::string(root) + "/result." + std::getenv("RANK"), r);
}

TEST_CASE("DDP find_unused_parameters: a parameter unused on every rank keeps an undefined gradient",
          "[ddp][multirank][unused]") {
  // With SGD momentum and weight decay a zero gradient would move the weight; single-device
  // training skips it. Both find_unused_parameters and static_graph give that.
  for (std::string strategy : {"{name: ddp, find_unused_parameters: true}", "{name: ddp, static_graph: true}"}) {
    DYNAMIC_SECTION(strategy) {
      const std::string dir = temp_dir("ddp-unused");
      UnusedSpec spec;
      spec.never = true;
      const auto ranks = run_scenario(dir, scenario_yaml("never: true", strategy), 2);
      check_ranks_match_reference(ranks, spec, 1);
      for (const auto& r : ranks) CHECK(r.grad_steps.at("never.weight") == 0);
    }
  }
}

TEST_CASE("DDP find_unused_parameters: a parameter used on one rank gets the mean with zeros from the others",
          "[ddp][multirank][unused]") {
  for (int64_t accumulate : {1, 2}) {
    DYNAMIC_SECTION("accumulate " << accumulate) {
      const std::string dir = temp_dir("ddp-unused-rank");
      UnusedSpec spec;
      spec.never = true;
      spec.rank0 = true;
      const auto ranks = run_scenario(
          dir, scenario_yaml("never: true, rank0: true", "{name: ddp, find_unused_parameters: true}", accumulate), 2);
      check_ranks_match_reference(ranks, spec, accumulate);
      for (const auto& r : ranks) CHECK(r.grad_steps.at("rank0.weight") == r.steps);  // rank 1 gets the average too
      CHECK(max_state_diff(ranks[0].state, ranks[1].state) == 0);
    }
  }
}

TEST_CASE("DDP without find_unused_parameters: a parameter without a gradient fails every rank, naming it",
          "[ddp][multirank][unused]") {
  const std::string dir = temp_dir("ddp-unused-error");
  double secs = 0;
  // The timeout is far above the expected run time: a rank left waiting in a collective would show.
  const auto ranks = run_scenario(dir, scenario_yaml("rank0: true", "{name: ddp, timeout: 120}"), 2, &secs);
  CHECK(secs < 60);
  for (const auto& r : ranks) {
    INFO(r.error);
    CHECK_THAT(r.error, Catch::Contains("'rank0.weight', 'rank0.bias'"));
    CHECK_THAT(r.error, Catch::Contains("on rank 1"));
    CHECK_THAT(r.error, Catch::Contains("find_unused_parameters: true"));
    CHECK(r.steps == 0);  // before the first update
  }
  CHECK_THAT(ranks[1].error, Catch::Contains("On this rank (1)"));
}

TEST_CASE("DDP static_graph: the used set of the first step is kept, and a step that differs fails every rank",
          "[ddp][multirank][unused]") {
  SECTION("the same parameters every step") {
    const std::string dir = temp_dir("ddp-static");
    UnusedSpec spec;
    spec.never = true;
    spec.rank0 = true;
    check_ranks_match_reference(
        run_scenario(dir, scenario_yaml("never: true, rank0: true", "{name: ddp, static_graph: true}"), 2), spec, 1);
  }
  SECTION("a parameter used from the third step on") {
    const std::string dir = temp_dir("ddp-static-change");
    double secs = 0;
    const auto ranks =
        run_scenario(dir, scenario_yaml("late_from: 2", "{name: ddp, static_graph: true, timeout: 120}"), 2, &secs);
    CHECK(secs < 60);
    for (const auto& r : ranks) {
      INFO(r.error);
      CHECK_THAT(r.error, Catch::Contains("static_graph"));
      CHECK_THAT(r.error, Catch::Contains("'late.weight', 'late.bias'"));
      CHECK_THAT(r.error, Catch::Contains("on ranks 0, 1"));
      CHECK(r.steps == 2);  // the two steps before the change were taken
    }
  }
}

TEST_CASE("DDP gradient_as_bucket_view: gradients are bucket views, with the same results",
          "[ddp][multirank][unused]") {
  for (int64_t accumulate : {1, 2}) {
    DYNAMIC_SECTION("accumulate " << accumulate) {
      const std::string spec = "never: true, rank0: true";
      const auto plain = run_scenario(temp_dir("ddp-view"),
                                      scenario_yaml(spec, "{name: ddp, find_unused_parameters: true}", accumulate), 2);
      const auto view = run_scenario(
          temp_dir("ddp-view"),
          scenario_yaml(spec, "{name: ddp, find_unused_parameters: true, gradient_as_bucket_view: true}", accumulate),
          2);
      for (int r = 0; r < 2; ++r) {
        INFO("rank " << r << ": " << view[r].error);
        REQUIRE(view[r].error.empty());
        CHECK(view[r].view_steps == view[r].steps);
        CHECK(plain[r].view_steps == 0);
        CHECK(view[r].grad_steps == plain[r].grad_steps);
        CHECK(view[r].losses == plain[r].losses);                   // bitwise
        CHECK(max_state_diff(view[r].state, plain[r].state) == 0);  // bitwise
      }
    }
  }
}

TEST_CASE("DDP gradient_as_bucket_view lowers the peak memory by about one copy of the gradients",
          "[ddp][multirank][unused][memory]") {
  // 16 layers of 1024 x 1024: 16.8 M parameters, 67 MB of fp32 gradients per rank. Without the
  // views a rank holds the gradients and their bucket copies at once; with them, the buckets and
  // at most the one gradient autograd just produced (zero_grad sets gradients to none).
  std::map<bool, double> peak;
  for (bool view : {false, true}) {
    const std::string strategy = std::string("{name: ddp, gradient_as_bucket_view: ") + (view ? "true" : "false") + "}";
    const auto ranks = run_scenario(
        temp_dir("ddp-view-mem"),
        "{width: 1024, depth: 16, mmap: true, trainer: {max_steps: 3, " + std::string("strategy: ") + strategy + "}}",
        2);
    REQUIRE(ranks[0].error.empty());
    peak[view] = ranks[0].peak_bytes;
  }
  const double grad_bytes = (16 * (1024.0 * 1024 + 1024) + 1024 + 1) * 4;
  WARN("DDP peak RSS growth during fit, 2 ranks, " << grad_bytes / 1e6 << " MB of gradients: " << peak[false] / 1e6
                                                   << " MB without, " << peak[true] / 1e6
                                                   << " MB with gradient_as_bucket_view");
  CHECK(peak[false] - peak[true] > 0.5 * grad_bytes);
}
