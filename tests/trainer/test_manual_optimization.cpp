// Manual optimization and several optimizers: a GAN trained through the Trainer matches the same
// GAN trained by a hand-written LibTorch loop; checkpoints resume it bitwise; bad configurations
// are refused before any step.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <unordered_map>

#include "boring_model.h"
#include "gan_model.h"
#include "volt/callbacks/model_checkpoint.h"
#include "volt/core/errors.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;
using Catch::Matchers::Contains;

namespace {

DataLoader gan_loader(int64_t samples = 48, int64_t batch = 8) {
  return DataLoader(std::make_shared<RandomDataset>(samples), DataLoaderOptions{batch, false, false, 0});
}

std::map<std::string, torch::Tensor> params_of(torch::nn::Module& m) {
  std::map<std::string, torch::Tensor> out;
  for (auto& kv : m.named_parameters()) out[kv.key()] = kv.value().detach().clone();
  return out;
}

double max_diff(const std::map<std::string, torch::Tensor>& a, const std::map<std::string, torch::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (const auto& [k, v] : a) m = std::max(m, (v - b.at(k)).abs().max().item<double>());
  return m;
}

/// The GAN trained by a plain LibTorch loop: the reference for the Trainer's manual optimization.
std::map<std::string, torch::Tensor> hand_written(GanOptions o, int64_t epochs, int64_t samples, int64_t batch,
                                                  std::vector<double>* g_losses = nullptr) {
  torch::manual_seed(3);
  GanModel m(o);
  m.train();
  torch::optim::Adam g(m.generator_parameters(), torch::optim::AdamOptions(o.g_lr));
  torch::optim::Adam d(m.discriminator_parameters(), torch::optim::AdamOptions(o.d_lr));
  std::vector<torch::optim::Optimizer*> opts{&g, &d};
  std::vector<std::vector<torch::Tensor>> owned{m.generator_parameters(), m.discriminator_parameters()};
  RandomDataset data(samples);
  for (int64_t e = 0; e < epochs; ++e) {
    for (int64_t b = 0; b * batch < samples; ++b) {
      std::vector<torch::Tensor> rows;
      for (int64_t i = b * batch; i < std::min(samples, (b + 1) * batch); ++i) rows.push_back(data.get(i)[0]);
      auto [gl, dl] = m.gan_step(
          torch::stack(rows), [](const torch::Tensor& l) { l.backward(); }, [&](int i) { opts[i]->step(); },
          [&](int i) {
            for (auto& p : owned[i]) p.mutable_grad() = torch::Tensor();
          },
          [&](int i) {
            for (auto& p : owned[1 - i]) p.requires_grad_(false);
          },
          [&](int i) {
            for (auto& p : owned[1 - i]) p.requires_grad_(true);
          },
          [&](int i) { torch::nn::utils::clip_grad_norm_(owned[i], o.clip); });
      if (g_losses) g_losses->push_back(gl.item<double>());
    }
    if (o.scheduler)
      for (auto& group : g.param_groups()) group.options().set_lr(group.options().get_lr() * 0.5);
  }
  return params_of(m);
}

TrainerOptions gan_options(const std::string& root, int64_t epochs) {
  TrainerOptions t = quiet_options(root);
  t.max_epochs = epochs;
  t.log_every_n_steps = 1;
  return t;
}

}  // namespace

TEST_CASE("a GAN under manual optimization matches a hand-written LibTorch loop", "[manual][optimizers]") {
  for (bool toggle : {true, false}) {
    INFO("toggle_optimizer " << toggle);
    GanOptions o;
    o.toggle = toggle;
    std::vector<double> ref_losses;
    const auto ref = hand_written(o, 2, 48, 8, &ref_losses);
    torch::manual_seed(3);
    GanModel m(o);
    Trainer t(gan_options(temp_dir("gan"), 2));
    auto loader = gan_loader();
    t.fit(m, loader);
    // Each LightningOptimizer::step() is a global step, as in Lightning: 6 batches x 2 optimizers x 2 epochs.
    CHECK(t.global_step() == 24);
    REQUIRE(m.g_losses.size() == ref_losses.size());
    for (size_t i = 0; i < ref_losses.size(); ++i) CHECK(m.g_losses[i] == Approx(ref_losses[i]).epsilon(1e-5));
    CHECK(max_diff(params_of(m), ref) < 1e-5);
    // The generator's StepLR, stepped by the module twice; the discriminator's lr untouched.
    CHECK(t.optimizers()[0].optimizer->param_groups()[0].options().get_lr() == Approx(0.01 * 0.25));
    CHECK(t.optimizers()[1].optimizer->param_groups()[0].options().get_lr() == Approx(0.02));
    CHECK(t.callback_metrics().count("g_loss") == 1);
    // Toggling restored every flag.
    for (auto& p : m.parameters()) CHECK(p.requires_grad());
  }
}

TEST_CASE("clip_gradients under manual optimization clips the optimizer's gradients", "[manual][optimizers]") {
  GanOptions o;
  o.clip = 0.05;
  const auto ref = hand_written(o, 1, 48, 8);
  torch::manual_seed(3);
  GanModel m(o);
  Trainer t(gan_options(temp_dir("gan_clip"), 1));
  auto loader = gan_loader();
  t.fit(m, loader);
  CHECK(max_diff(params_of(m), ref) < 1e-5);
  GanOptions unclipped;
  CHECK(max_diff(params_of(m), hand_written(unclipped, 1, 48, 8)) > 1e-4);  // the clipping mattered
}

TEST_CASE("a GAN resumed from a mid-training checkpoint equals the uninterrupted run bitwise", "[manual][optimizers]") {
  const std::string root = temp_dir("gan_resume");
  auto opts = [&](int64_t epochs) {
    TrainerOptions t = gan_options(root, epochs);
    t.enable_checkpointing = true;
    return t;
  };
  torch::manual_seed(3);
  GanModel whole;
  {
    TrainerOptions t = gan_options(temp_dir("gan_whole"), 3);
    Trainer tr(t);
    auto loader = gan_loader();
    tr.fit(whole, loader);
  }
  torch::manual_seed(3);
  GanModel first;
  {
    Trainer tr(opts(1));
    auto loader = gan_loader();
    tr.fit(first, loader);
  }
  torch::manual_seed(11);  // a different initialization: everything must come from the checkpoint
  GanModel resumed;
  Trainer tr(opts(3));
  auto loader = gan_loader();
  tr.fit(resumed, loader, nullptr, "last");
  CHECK(tr.global_step() == 36);
  for (auto& [k, v] : params_of(whole)) CHECK(torch::equal(v, params_of(resumed).at(k)));
  // The generator's learning rate (scheduler state and param-group hyper-parameters) came back too.
  CHECK(tr.optimizers()[0].optimizer->param_groups()[0].options().get_lr() == 0.01 * 0.125);
}

TEST_CASE("param-group hyper-parameters are restored with the optimizer state", "[manual][optimizers]") {
  // A learning rate changed by hand (no scheduler) is restored on resume, as PyTorch's
  // Optimizer.load_state_dict restores param_groups.
  struct Halving : BoringModel {
    using BoringModel::BoringModel;
    void on_train_epoch_end() override {
      auto* opt = trainer()->optimizer();
      opt->param_groups()[0].options().set_lr(opt->param_groups()[0].options().get_lr() / 2);
    }
  };
  BoringOptions bo;
  bo.adam = true;
  bo.lr = 0.04;
  const std::string root = temp_dir("hparams_resume");
  TrainerOptions t = quiet_options(root);
  t.enable_checkpointing = true;
  t.max_epochs = 2;
  Halving a(bo);
  {
    Trainer tr(t);
    DataLoader loader(std::make_shared<RandomDataset>(32), DataLoaderOptions{8, false, false, 0});
    tr.fit(a, loader);
  }
  Halving b(bo);
  t.max_epochs = 3;
  Trainer tr(t);
  DataLoader loader(std::make_shared<RandomDataset>(32), DataLoaderOptions{8, false, false, 0});
  tr.fit(b, loader, nullptr, "last");
  CHECK(tr.optimizer()->param_groups()[0].options().get_lr() == 0.04 / 8);
}

TEST_CASE("bad optimizer configurations are refused before any step", "[manual][optimizers]") {
  auto error_of = [](LightningModule& m, TrainerOptions t) {
    Trainer tr(t);
    auto loader = gan_loader();
    try {
      tr.fit(m, loader);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string root = temp_dir("gan_bad");
  SECTION("several optimizers under automatic optimization") {
    GanModel m;
    m.automatic_optimization = true;
    CHECK_THAT(error_of(m, gan_options(root, 1)),
               Contains("2 optimizers") && Contains("manual optimization") && Contains("automatic_optimization"));
  }
  SECTION("accumulate_grad_batches and gradient_clip_val under manual optimization") {
    GanModel m;
    auto t = gan_options(root, 1);
    t.accumulate_grad_batches = 2;
    CHECK_THAT(error_of(m, t), Contains("trainer.accumulate_grad_batches"));
    t = gan_options(root, 1);
    t.gradient_clip_val = 1.0;
    CHECK_THAT(error_of(m, t), Contains("trainer.gradient_clip_val") && Contains("clip_gradients"));
  }
  SECTION("a parameter in two optimizers") {
    struct Twice : GanModel {
      Optimizers configure_optimizers() override {
        auto both = parameters();
        return std::vector<OptimizerConfig>{
            {std::make_shared<torch::optim::SGD>(generator_parameters(), torch::optim::SGDOptions(0.1))},
            {std::make_shared<torch::optim::SGD>(both, torch::optim::SGDOptions(0.1))}};
      }
    } m;
    CHECK_THAT(error_of(m, gan_options(root, 1)),
               Contains("g_block.linear.weight") && Contains("optimizer 0") && Contains("optimizer 1"));
  }
  SECTION("manual_backward under automatic optimization") {
    struct Auto : BoringModel {
      torch::Tensor training_step(const Batch& b, int64_t) override {
        auto out = forward(b[0]);
        auto loss = torch::mse_loss(out, torch::ones_like(out));
        manual_backward(loss);
        return loss;
      }
    } m;
    CHECK_THAT(error_of(m, gan_options(root, 1)), Contains("manual_backward() under automatic optimization"));
  }
  SECTION("optimizers() outside fit") {
    GanModel m;
    CHECK_THROWS_AS(m.optimizers(), ConfigError);
    CHECK_THROWS_AS(m.manual_backward(torch::ones({})), ConfigError);
  }
}
