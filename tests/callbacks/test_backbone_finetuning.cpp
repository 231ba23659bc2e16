// BackboneFinetuning (and BaseFinetuning's helpers): the backbone stays frozen until its epoch, then
// trains in a param group of its own whose lr follows Lightning's schedule; a resumed fit rebuilds
// that group before the optimizer state loads, on one process and under DDP(2); FSDP is refused.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <vector>

#include "backbone_model.h"
#include "boring_model.h"
#include "distributed/multi_rank.h"
#include "volt/callbacks/backbone_finetuning.h"
#include "volt/callbacks/lambda_callback.h"
#include "volt/callbacks/model_checkpoint.h"
#include "volt/core/errors.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;
using Catch::Matchers::Contains;

namespace {
std::map<std::string, torch::Tensor> snapshot(torch::nn::Module& m) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& kv : m.named_parameters()) out[kv.key()] = kv.value().detach().clone();
  return out;
}

/// Each epoch's (param groups, last group's lr) at the epoch's end.
struct GroupLog {
  std::vector<std::pair<size_t, double>> epochs;
  std::shared_ptr<LambdaCallback> callback() {
    LambdaCallback::Hooks h;
    h.on_train_epoch_end = [this](Trainer& t, LightningModule&) {
      const auto& groups = t.optimizer()->param_groups();
      epochs.emplace_back(groups.size(), groups.back().options().get_lr());
    };
    return std::make_shared<LambdaCallback>(h, "GroupLog");
  }
};

DataLoader loader() { return DataLoader(std::make_shared<RandomDataset>(16), DataLoaderOptions{4, false, false, 0}); }
}  // namespace

TEST_CASE("BackboneFinetuning: frozen until its epoch, then a param group with Lightning's lr schedule",
          "[callbacks][backbone_finetuning]") {
  torch::manual_seed(3);
  BackboneModel model(/*lr=*/0.01);
  const auto before = snapshot(*model.backbone);
  auto o = quiet_options(temp_dir("backbone-finetuning"));
  o.max_epochs = 5;
  BackboneFinetuningOptions bo;
  bo.unfreeze_backbone_at_epoch = 2;
  auto cb = std::make_shared<BackboneFinetuning>(bo);
  GroupLog log;
  std::map<std::string, torch::Tensor> at_unfreeze;
  LambdaCallback::Hooks probe;
  probe.on_train_epoch_end = [&](Trainer& t, LightningModule&) {
    if (t.current_epoch() == 1) at_unfreeze = snapshot(*model.backbone);
  };
  Trainer trainer(o, {cb, log.callback(), std::make_shared<LambdaCallback>(probe, "probe")});
  auto dl = loader();
  trainer.fit(model, dl);
  for (const auto& [name, t] : at_unfreeze) CHECK(torch::equal(t, before.at(name)));  // frozen for epochs 0-1
  bool moved = false;
  for (const auto& kv : model.backbone->named_parameters()) {
    CHECK(kv.value().requires_grad());
    moved = moved || !torch::equal(kv.value(), before.at(kv.key()));
  }
  CHECK(moved);
  // 0.01 x 0.1 at the unfreeze, then x2 per epoch (lambda_func(epoch + 1) = 2), capped at 0.01.
  REQUIRE(log.epochs.size() == 5);
  CHECK(log.epochs[0] == std::make_pair(size_t{1}, 0.01));
  CHECK(log.epochs[1].first == 1);
  CHECK(log.epochs[2].first == 2);
  CHECK(log.epochs[2].second == Approx(0.001));
  CHECK(log.epochs[3].second == Approx(0.002));
  CHECK(log.epochs[4].second == Approx(0.004));
  CHECK(cb->previous_backbone_lr().value() == Approx(0.004));
  const YAML::Node state = cb->state_dict();
  REQUIRE(state["internal_optimizer_metadata"][0].size() == 2);
  CHECK(state["internal_optimizer_metadata"][0][1]["params"][0].as<std::string>() == "backbone.fc1.weight");
}

TEST_CASE("BackboneFinetuning: should_align caps the backbone lr, a custom lambda_func",
          "[callbacks][backbone_finetuning]") {
  torch::manual_seed(3);
  BackboneModel model(/*lr=*/0.01, /*adam=*/false);
  auto o = quiet_options(temp_dir("backbone-finetuning-align"));
  o.max_epochs = 4;
  BackboneFinetuningOptions bo;
  bo.unfreeze_backbone_at_epoch = 0;
  bo.backbone_initial_lr = 0.004;
  GroupLog log;
  Trainer trainer(o, {std::make_shared<BackboneFinetuning>(bo, [](int64_t epoch) { return epoch == 2 ? 3.0 : 1.5; }),
                      log.callback()});
  auto dl = loader();
  trainer.fit(model, dl);
  REQUIRE(log.epochs.size() == 4);
  CHECK(log.epochs[0].second == Approx(0.004));
  CHECK(log.epochs[1].second == Approx(0.01));  // 0.004 x 3 = 0.012 > 0.01: aligned
  CHECK(log.epochs[2].second == Approx(0.01));  // 0.01 x 1.5 capped again
}

TEST_CASE("BaseFinetuning helpers: freeze, make_trainable, unfreeze_and_add_param_group",
          "[callbacks][backbone_finetuning]") {
  auto net = std::make_shared<torch::nn::SequentialImpl>(torch::nn::Linear(4, 4), torch::nn::BatchNorm1d(4),
                                                         torch::nn::Linear(4, 2));
  const BaseFinetuning::Modules mods{net};
  CHECK(BaseFinetuning::flatten_modules(mods).size() == 3);
  BaseFinetuning::freeze(mods, /*train_bn=*/true);
  CHECK(BaseFinetuning::filter_params(mods, true, /*requires_grad=*/true).size() == 2);  // BatchNorm's
  BaseFinetuning::freeze(mods, /*train_bn=*/false);
  CHECK(BaseFinetuning::filter_params(mods, true, true).empty());
  auto head = torch::nn::Linear(2, 2);
  torch::optim::SGD opt(head->parameters(), torch::optim::SGDOptions(0.5).momentum(0.9));
  BaseFinetuning::unfreeze_and_add_param_group(mods, opt, std::nullopt, /*initial_denom_lr=*/10.0, /*train_bn=*/false);
  REQUIRE(opt.param_groups().size() == 2);
  CHECK(opt.param_groups()[1].params().size() == 4);  // the Linears', not BatchNorm's
  CHECK(opt.param_groups()[1].options().get_lr() == Approx(0.05));
  CHECK(static_cast<torch::optim::SGDOptions&>(opt.param_groups()[1].options()).momentum() == 0.9);
  // Already held: nothing added again.
  BaseFinetuning::unfreeze_and_add_param_group(mods, opt, 0.1);
  CHECK(opt.param_groups().size() == 3);  // only BatchNorm's two parameters were new
  CHECK(opt.param_groups()[2].params().size() == 2);
}

TEST_CASE("BackboneFinetuning: a module without a backbone and FSDP are refused", "[callbacks][backbone_finetuning]") {
  auto dl = loader();
  {
    BoringModel model;
    Trainer trainer(quiet_options(temp_dir("backbone-none")), {std::make_shared<BackboneFinetuning>()});
    CHECK_THROWS_WITH(trainer.fit(model, dl), Contains("no submodule named 'backbone'"));
  }
  {
    BackboneModel model;
    auto o = quiet_options(temp_dir("backbone-fsdp"));
    o.strategy = "fsdp";
    Trainer trainer(o, {std::make_shared<BackboneFinetuning>()});
    CHECK_THROWS_WITH(trainer.fit(model, dl), Contains("strategy 'fsdp'"));
  }
}

TEST_CASE("BackboneFinetuning: a fit resumed after the unfreeze rebuilds the param group before the optimizer state",
          "[callbacks][backbone_finetuning]") {
  const std::string dir = temp_dir("backbone-resume");
  auto run = [&](int64_t max_epochs, const std::string& ckpt, bool save) {
    torch::manual_seed(5);
    auto model = std::make_shared<BackboneModel>(0.01);
    auto o = quiet_options(dir);
    o.max_epochs = max_epochs;
    o.enable_checkpointing = save;  // the ModelCheckpoint below needs it on
    BackboneFinetuningOptions bo;
    bo.unfreeze_backbone_at_epoch = 1;
    std::vector<std::shared_ptr<Callback>> cbs{std::make_shared<BackboneFinetuning>(bo)};
    if (save) {
      ModelCheckpointOptions mc;
      mc.dirpath = dir + "/ckpt";
      mc.save_last = true;
      cbs.push_back(std::make_shared<ModelCheckpoint>(mc));
    }
    Trainer trainer(o, cbs);
    auto dl = loader();
    trainer.fit(*model, dl, nullptr, ckpt);
    CHECK(trainer.optimizer()->param_groups().size() == 2);
    return snapshot(*model);
  };
  const auto whole = run(4, "", false);
  run(2, "", true);  // stops after epoch 1: the group exists, Adam has state for the backbone
  const auto resumed = run(4, dir + "/ckpt/last.ckpt", false);
  for (const auto& [name, t] : whole) CHECK(torch::allclose(t, resumed.at(name), 0, 0));
}

TEST_CASE("BackboneFinetuning under DDP(2): trains like one process, and resumes past the unfreeze",
          "[callbacks][backbone_finetuning][multirank]") {
  const std::string dir = temp_dir("backbone-ddp");
  auto kv = quiet_worker_kv(dir);
  kv["backbone_finetune_at"] = "1";
  kv["adam"] = "true";
  kv["lr"] = "0.01";
  kv["shuffle"] = "false";
  kv["trainer.max_epochs"] = "3";
  for (const char* sub : {"/single", "/ddp", "/part1", "/part2"}) std::filesystem::create_directories(dir + sub);
  auto single = kv;
  single["batch_size"] = "8";
  REQUIRE(run_worker(args_for(dir + "/single.pt", single), dir + "/single") == 0);
  kv["batch_size"] = "4";
  kv["trainer.devices"] = "2";
  kv["trainer.strategy"] = "ddp";
  REQUIRE(run_worker(args_for(dir + "/ddp.pt", kv), dir + "/ddp") == 0);
  // Interrupted after epoch 1 (unfrozen at its start), then resumed to epoch 2.
  auto first = kv;
  first["trainer.max_epochs"] = "2";
  first["trainer.enable_checkpointing"] = "true";
  first["trainer.default_root_dir"] = dir + "/part";
  REQUIRE(run_worker(args_for(dir + "/part1.pt", first), dir + "/part1") == 0);
  auto second = first;
  second["trainer.max_epochs"] = "3";
  second["ckpt_path"] = "last";
  REQUIRE(run_worker(args_for(dir + "/part2.pt", second), dir + "/part2") == 0);
  const auto s = read_worker_output(dir + "/single.pt"), d = read_worker_output(dir + "/ddp.pt"),
             r = read_worker_output(dir + "/part2.pt");
  REQUIRE(!s.state.empty());
  REQUIRE(s.state.size() == d.state.size());
  for (const auto& [name, t] : s.state) {
    INFO(name);
    CHECK(torch::allclose(t, d.state.at(name), 1e-4, 1e-5));
    CHECK(torch::allclose(r.state.at(name), d.state.at(name), 1e-6, 1e-7));
  }
}
