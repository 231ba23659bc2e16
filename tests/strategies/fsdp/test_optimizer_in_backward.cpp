// FSDP's optimizer_in_backward: each unit's shard steps inside backward as soon as its gradient is
// ready, and the parameters come out bit for bit the same as stepping after backward (1 and 2
// processes, with and without cpu_offload, Adam and SGD, accumulation, clipping by value); what
// cannot be exact is refused before training.
#include <torch/cuda.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "boring_model.h"
#include "distributed/multi_rank.h"
#include "error_capture.h"
#include "gan_model.h"
#include "gpu_visibility.h"
#include "volt/strategies/fsdp/fsdp_strategy.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;

namespace {

/// The worker's run under FSDP with `extra` strategy keys, `kv` as the other overrides.
WorkerResult run_fsdp(std::map<std::string, std::string> kv, int world, const std::string& extra,
                      const std::string& dir, const std::string& name) {
  kv["trainer.devices"] = std::to_string(world);
  kv["trainer.strategy"] = "{name: fsdp, auto_wrap_policy: {module_types: [Block]}" + extra + "}";
  REQUIRE(run_worker(args_for(dir + "/" + name + ".pt", kv), dir) == 0);
  return read_worker_output(dir + "/" + name + ".pt");
}

/// Every tensor of `a` equals `b`'s bit for bit.
void check_equal_states(const std::map<std::string, torch::Tensor>& a, const std::map<std::string, torch::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (const auto& [k, v] : a) {
    INFO(k);
    REQUIRE(b.count(k) == 1);
    CHECK(torch::equal(v, b.at(k)));
  }
}

}  // namespace

TEST_CASE("optimizer_in_backward gives the same parameters as stepping after backward, bit for bit",
          "[fsdp][optimizer_in_backward][multirank]") {
  struct Case {
    int world;
    bool offload;
    bool adam;
    int accum;
    std::string clip_value;  // "" = no clipping
  };
  const std::vector<Case> cases = {
      {1, false, true, 1, ""}, {1, true, true, 2, ""},       {2, false, true, 2, ""},
      {2, true, true, 1, ""},  {2, false, false, 1, "0.01"}, {2, true, false, 2, "0.01"},
  };
  for (const auto& c : cases) {
    DYNAMIC_SECTION("world " << c.world << (c.offload ? " cpu_offload" : "") << (c.adam ? " Adam" : " SGD")
                             << " accumulate " << c.accum << " clip value '" << c.clip_value << "'") {
      const std::string dir = temp_dir("fsdp-oib");
      auto kv = quiet_blocks_kv(dir);
      kv["batch_size"] = "4";
      kv["trainer.accumulate_grad_batches"] = std::to_string(c.accum);
      if (c.adam) {
        kv["adam"] = "true";
        kv["lr"] = "0.01";
      }
      if (!c.clip_value.empty()) {
        kv["trainer.gradient_clip_val"] = c.clip_value;
        kv["trainer.gradient_clip_algorithm"] = "value";
      }
      const std::string offload = c.offload ? ", cpu_offload: true" : "";
      WorkerResult after = run_fsdp(kv, c.world, offload, dir, "after");
      WorkerResult inside = run_fsdp(kv, c.world, offload + ", optimizer_in_backward: true", dir, "inside");
      REQUIRE(inside.global_step == after.global_step);
      REQUIRE(inside.global_step > 0);
      REQUIRE(inside.losses.size() == after.losses.size());
      for (size_t i = 0; i < after.losses.size(); ++i) CHECK(inside.losses[i] == after.losses[i]);
      check_equal_states(inside.state, after.state);
      // It really stepped inside backward: the root and 3 Blocks stepped in the last sync
      // backward, all but the last to get its gradient (or the root's) while autograd still ran.
      CHECK(after.backward_units_stepped == -1);
      CHECK(inside.backward_units_stepped == 4);
      CHECK(inside.backward_units_during_autograd >= 2);
      CHECK(inside.backward_units_during_autograd < 4);
    }
  }
}

TEST_CASE("optimizer_in_backward in one process: the same parameters, the units stepped inside backward",
          "[fsdp][optimizer_in_backward]") {
  struct StepProbe : Callback {
    std::string state_key() const override { return "StepProbe"; }
    void on_after_backward(Trainer& t, LightningModule&) override {
      steps = dynamic_cast<FSDPStrategy&>(t.strategy()).backward_steps();
    }
    // After backward: the optimizer's parameters that still hold a gradient.
    void on_before_optimizer_step(Trainer&, LightningModule&, torch::optim::Optimizer& opt) override {
      with_grad = 0;
      for (const auto& g : opt.param_groups())
        for (const auto& p : g.params()) with_grad += p.grad().defined() ? 1 : 0;
      ++seen;
    }
    volt::detail::FSDPSchedule::BackwardSteps steps;
    int64_t with_grad = -1, seen = 0;
  };
  for (const bool offload : {false, true}) {
    DYNAMIC_SECTION((offload ? "cpu_offload (a host thread steps)" : "in the gradient hook")) {
      auto fit = [&](bool in_backward, volt::detail::FSDPSchedule::BackwardSteps* steps, int64_t* with_grad) {
        torch::manual_seed(11);
        BoringOptions bo;
        bo.blocks = 3;
        bo.hidden = 33;
        bo.adam = true;
        bo.lr = 0.01;
        auto m = std::make_shared<BoringModel>(bo);
        auto o = quiet_options(temp_dir("fsdp-oib-1"));
        o.max_epochs = 2;
        o.accumulate_grad_batches = 2;
        o.gradient_clip_val = 0.05;
        o.gradient_clip_algorithm = GradientClipAlgorithm::Value;
        o.strategy = "fsdp";
        o.strategy.fsdp.auto_wrap_policy.module_types = {"Block"};
        o.strategy.fsdp.cpu_offload = offload;
        o.strategy.fsdp.optimizer_in_backward = in_backward;
        auto probe = std::make_shared<StepProbe>();
        DataLoader loader(std::make_shared<RandomDataset>(40), DataLoaderOptions{4, true, false, 0});
        Trainer t(o, {probe});
        t.fit(*m, loader);
        t.strategy().unshard_module(*m);
        *steps = probe->steps;
        REQUIRE(probe->seen > 0);
        *with_grad = probe->with_grad;
        std::map<std::string, torch::Tensor> out;
        for (auto& kv : m->named_parameters()) out[kv.key()] = kv.value().detach().clone();
        return out;
      };
      volt::detail::FSDPSchedule::BackwardSteps after_steps, inside_steps;
      int64_t after_grads = 0, inside_grads = 0;
      const auto after = fit(false, &after_steps, &after_grads);
      const auto inside = fit(true, &inside_steps, &inside_grads);
      check_equal_states(inside, after);
      CHECK(after_steps.units == 0);
      CHECK(inside_steps.units == 4);
      CHECK(inside_steps.during_autograd == 3);  // all but the first Block, whose gradient comes last
      // Each unit's gradient is freed once it has stepped; stepping after backward keeps them.
      CHECK(after_grads > 0);
      CHECK(inside_grads == 0);
    }
  }
}

TEST_CASE("optimizer_in_backward refuses what needs every gradient before a step, naming the keys",
          "[fsdp][optimizer_in_backward]") {
  DataLoader loader(std::make_shared<RandomDataset>(16), DataLoaderOptions{8, false, false, 0});
  auto o = quiet_options(temp_dir("fsdp-oib-refuse"));
  o.strategy = "fsdp";
  o.strategy.fsdp.auto_wrap_policy.module_types = {"Block"};
  o.strategy.fsdp.optimizer_in_backward = true;
  SECTION("clipping by norm") {
    o.gradient_clip_val = 0.5;
    auto m = std::make_shared<BoringModel>();
    const std::string e = config_error([&] { Trainer(o).fit(*m, loader); });
    CHECK_THAT(e, Catch::Contains("trainer.gradient_clip_val") && Catch::Contains("optimizer_in_backward") &&
                      Catch::Contains("the norm needs every gradient"));
  }
  SECTION("manual optimization (and its several optimizers)") {
    auto m = std::make_shared<GanModel>();
    const std::string e = config_error([&] { Trainer(o).fit(*m, loader); });
    CHECK_THAT(e, Catch::Contains("optimizer_in_backward") && Catch::Contains("manual optimization"));
  }
  SECTION("LBFGS") {
    struct Lbfgs : BoringModel {
      Optimizers configure_optimizers() override {
        return {std::make_shared<torch::optim::LBFGS>(parameters(), torch::optim::LBFGSOptions(0.1))};
      }
    };
    auto m = std::make_shared<Lbfgs>();
    const std::string e = config_error([&] { Trainer(o).fit(*m, loader); });
    CHECK_THAT(e, Catch::Contains("optimizer_in_backward") && Catch::Contains("LBFGS"));
  }
}

namespace {
/// A strategy that says it steps inside backward, with 16-mixed's gradient scaler: the Trainer's
/// check of the precision runs without a GPU (no fit reaches a step).
struct InBackward16 : SingleDeviceStrategy {
  InBackward16() : SingleDeviceStrategy(Precision("16-mixed", "cuda"), "cpu") {}
  bool steps_in_backward() const override { return true; }
};
}  // namespace

TEST_CASE("optimizer_in_backward refuses 16-mixed: its scaler skips whole steps", "[fsdp][optimizer_in_backward]") {
  InBackward16 s;
  REQUIRE(s.precision().grad_scaler() != nullptr);
  auto o = quiet_options(temp_dir("fsdp-oib-fp16"));
  Trainer t(o);
  std::vector<std::shared_ptr<Callback>> none;
  HookDispatcher hooks(t, none);
  Optimization opt(o, s, hooks);
  BoringModel m;
  const std::string e = config_error([&] { opt.configure(m); });
  CHECK_THAT(e, Catch::Contains("trainer.precision") && Catch::Contains("16-mixed") &&
                    Catch::Contains("optimizer_in_backward"));
}

TEST_CASE("optimizer_in_backward is a strategy key in YAML and off by default", "[fsdp][optimizer_in_backward]") {
  CHECK_FALSE(FSDPOptions{}.optimizer_in_backward);
  auto s = volt::detail::YamlCodec<StrategyOptions>::decode(
      YAML::Load("{name: fsdp, optimizer_in_backward: true, cpu_offload: true}"), "trainer.strategy");
  CHECK(s.fsdp.optimizer_in_backward);
  CHECK(volt::detail::YamlCodec<StrategyOptions>::encode(s)["optimizer_in_backward"].as<bool>());
}

TEST_CASE("CUDA: optimizer_in_backward matches stepping after backward bit for bit, offloaded too",
          "[cuda][fsdp][optimizer_in_backward][multirank]") {
  if (volt::testing::no_cuda()) return;
  struct Case {
    int world;
    std::string extra;
  };
  // NCCL at world size 1 (GPU shards, PyTorch's fused AdamW per unit); offloaded shards stepped on
  // the host thread, at world 1 and with 2 Gloo ranks on one GPU.
  const std::vector<Case> cases = {{1, ", process_group_backend: nccl"},
                                   {1, ", process_group_backend: nccl, cpu_offload: true"},
                                   {2, ", cpu_offload: true"}};
  for (const auto& c : cases) {
    DYNAMIC_SECTION("world " << c.world << c.extra) {
      const std::string dir = temp_dir("cuda-oib");
      auto kv = quiet_blocks_kv(dir);
      kv["batch_size"] = "4";
      kv["adam"] = "true";
      kv["lr"] = "0.01";
      kv["trainer.accelerator"] = "cuda";
      WorkerResult after = run_fsdp(kv, c.world, c.extra, dir, "after");
      WorkerResult inside = run_fsdp(kv, c.world, c.extra + ", optimizer_in_backward: true", dir, "inside");
      REQUIRE(inside.losses.size() == after.losses.size());
      for (size_t i = 0; i < after.losses.size(); ++i) CHECK(inside.losses[i] == after.losses[i]);
      check_equal_states(inside.state, after.state);
      CHECK(inside.backward_units_stepped == 4);
      CHECK(inside.backward_units_during_autograd >= 2);
      if (c.extra.find("cpu_offload") != std::string::npos) {
        // One exact-size pinned gradient buffer per unit, reused step after step.
        int64_t bytes = 0;
        for (int64_t n : inside.shard_numels) bytes += n * 4;
        CHECK(inside.host_grad_buffers == 4);
        CHECK(inside.host_grad_requested == bytes);
        CHECK(inside.host_shard_requested == bytes);
      }
    }
  }
}
