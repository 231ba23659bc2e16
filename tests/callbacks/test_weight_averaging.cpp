// EMAWeightAveraging and StochasticWeightAveraging in one process: the averaged weights against
// references computed here from the weights recorded after every step or epoch, validation on the
// averaged weights, the SWA learning rates, resume, options and refusals.
#include <torch/torch.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "boring_model.h"
#include "cli/toy_classes.h"
#include "volt/callbacks/ema_weight_averaging.h"
#include "volt/callbacks/model_checkpoint.h"
#include "volt/callbacks/on_exception_checkpoint.h"
#include "volt/callbacks/stochastic_weight_averaging.h"
#include "volt/checkpoint/checkpoint.h"
#include "volt/cli/cli.h"
#include "volt/core/errors.h"
#include "volt/optim/lr_scheduler.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

using Weights = std::map<std::string, torch::Tensor>;

Weights weights(LightningModule& m) {
  Weights w;
  for (auto& kv : m.named_parameters()) w[kv.key()] = kv.value().detach().clone();
  return w;
}

double max_diff(const Weights& a, const Weights& b) {
  REQUIRE(a.size() == b.size());
  double d = 0;
  for (const auto& [k, v] : a) d = std::max(d, (v - b.at(k)).abs().max().item<double>());
  return d;
}

/// Records the weights after every training batch and epoch, inside validation, and the LR at
/// every batch start. Placed after the averaging callback, it sees what that one left.
struct Recorder : Callback {
  std::string state_key() const override { return "Recorder"; }
  void on_train_batch_start(Trainer& t, LightningModule&, const Batch&, int64_t) override {
    lrs.push_back(t.optimizer()->param_groups()[0].options().get_lr());
  }
  void on_train_batch_end(Trainer&, LightningModule& m, const torch::Tensor&, const Batch&, int64_t) override {
    steps.push_back(weights(m));
  }
  void on_train_epoch_end(Trainer&, LightningModule& m) override { epochs.push_back(weights(m)); }
  void on_validation_batch_end(Trainer& t, LightningModule& m, const Batch&, int64_t i) override {
    if (i == 0 && !t.sanity_checking()) in_validation.push_back(weights(m));
  }
  std::vector<Weights> steps, epochs, in_validation;
  std::vector<double> lrs;
};

/// `decay` EMA of ws[first], ws[first + every], ... up to ws[last], as torch's get_ema_avg_fn.
Weights ema_of(const std::vector<Weights>& ws, double decay, size_t first = 0, size_t every = 1,
               size_t last = SIZE_MAX) {
  Weights e;
  for (size_t k = first; k < ws.size() && k <= last; k += every) {
    if (e.empty()) {
      for (const auto& [n, v] : ws[k]) e[n] = v.clone();
      continue;
    }
    for (auto& [n, v] : e) v = v * decay + ws[k].at(n) * (1.0 - decay);
  }
  return e;
}

/// The equal-weight mean of ws[first..], as the running mean computes it.
Weights mean_of(const std::vector<Weights>& ws, size_t first) {
  Weights a;
  int64_t n = 0;
  for (size_t k = first; k < ws.size(); ++k, ++n) {
    if (a.empty()) {
      for (const auto& [name, v] : ws[k]) a[name] = v.clone();
      continue;
    }
    for (auto& [name, v] : a) v = v + (ws[k].at(name) - v) / static_cast<double>(n + 1);
  }
  return a;
}

DataLoader loader(int64_t n, int64_t batch_size, bool shuffle = false) {
  DataLoaderOptions o;
  o.batch_size = batch_size;
  o.shuffle = shuffle;
  return DataLoader(std::make_shared<RandomDataset>(n), o);
}

BoringOptions small() {
  BoringOptions b;
  b.hidden = 8;
  return b;
}

/// SGD(0.1) with StepLR(1, 0.5) stepped after every optimizer step.
class StepLRModel : public BoringModel {
 public:
  using BoringModel::BoringModel;
  Optimizers configure_optimizers() override {
    OptimizerConfig c;
    c.optimizer = std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1));
    c.lr_scheduler = std::make_shared<StepLR>(*c.optimizer, 1, 0.5);
    c.interval = SchedulerInterval::Step;
    return c;
  }
};

StochasticWeightAveragingOptions swa_options(double lr, int64_t start_epoch, int64_t annealing, std::string how) {
  StochasticWeightAveragingOptions o;
  o.swa_lrs.values = {lr};
  o.swa_epoch_start = {static_cast<double>(start_epoch), false};
  o.annealing_epochs = annealing;
  o.annealing_strategy = std::move(how);
  return o;
}

}  // namespace

TEST_CASE("EMAWeightAveraging: the EMA of the weights after each step, validated on, and in the model after fit",
          "[callbacks][weight_averaging][ema]") {
  torch::manual_seed(3);
  BoringModel model(small());
  DataLoader train = loader(32, 8), val = loader(8, 8);
  EMAWeightAveragingOptions eo;
  eo.decay = 0.7;
  auto ema = std::make_shared<EMAWeightAveraging>(eo);
  auto rec = std::make_shared<Recorder>();
  auto o = quiet_options(temp_dir("ema"));
  o.max_epochs = 2;
  Trainer trainer(o, {ema, rec});
  trainer.fit(model, train, &val);

  REQUIRE(rec->steps.size() == 8);
  CHECK(ema->n_averaged() == 8);
  const Weights expected = ema_of(rec->steps, 0.7);
  CHECK(max_diff(weights(model), expected) < 1e-7);
  CHECK(max_diff(weights(model), rec->steps.back()) > 1e-4);  // the average is not the last weights
  // Each epoch's validation ran on the EMA of that epoch's steps, and training went on from the
  // trained weights.
  REQUIRE(rec->in_validation.size() == 2);
  CHECK(max_diff(rec->in_validation[0], ema_of(rec->steps, 0.7, 0, 1, 3)) < 1e-7);
  CHECK(max_diff(rec->in_validation[1], expected) < 1e-7);
  REQUIRE(rec->epochs.size() == 2);
  CHECK(max_diff(rec->epochs[0], rec->steps[3]) == 0.0);
  CHECK(max_diff(rec->epochs[1], rec->steps[7]) == 0.0);
  CHECK(ema->averaged_numel() == 32 * 8 + 8 + 8 * 8 + 8 + 8 * 2 + 2);
}

TEST_CASE("EMAWeightAveraging: update_every_n_steps, update_starting_at_step / _epoch and accumulation",
          "[callbacks][weight_averaging][ema]") {
  SECTION("should_update as Lightning's") {
    EMAWeightAveragingOptions eo;
    eo.update_every_n_steps = 2;
    eo.update_starting_at_step = 3;
    EMAWeightAveraging e(eo);
    std::vector<int64_t> steps;
    for (int64_t i = 0; i < 9; ++i)
      if (e.should_update(i, std::nullopt)) steps.push_back(i);
    CHECK(steps == std::vector<int64_t>{4, 6, 8});
    CHECK_FALSE(e.should_update(std::nullopt, 5));  // no epoch updates unless update_starting_at_epoch
    eo = {};
    eo.update_every_n_steps = 0;
    eo.update_starting_at_epoch = 1;
    EMAWeightAveraging by_epoch(eo);
    CHECK_FALSE(by_epoch.should_update(4, std::nullopt));
    CHECK_FALSE(by_epoch.should_update(std::nullopt, 0));
    CHECK(by_epoch.should_update(std::nullopt, 1));
  }
  SECTION("in a fit") {
    torch::manual_seed(4);
    BoringModel model(small());
    DataLoader train = loader(32, 8);
    EMAWeightAveragingOptions eo;
    eo.decay = 0.6;
    eo.update_every_n_steps = 2;
    eo.update_starting_at_step = 3;
    auto ema = std::make_shared<EMAWeightAveraging>(eo);
    auto rec = std::make_shared<Recorder>();
    auto o = quiet_options(temp_dir("ema_every"));
    o.max_epochs = 2;
    Trainer trainer(o, {ema, rec});
    trainer.fit(model, train);
    CHECK(ema->n_averaged() == 2);  // after steps 4 and 6 (0-based)
    CHECK(max_diff(weights(model), ema_of(rec->steps, 0.6, 4, 2)) < 1e-7);
  }
  SECTION("accumulate_grad_batches: only batches that stepped update") {
    torch::manual_seed(5);
    BoringModel model(small());
    DataLoader train = loader(32, 4);
    EMAWeightAveragingOptions eo;
    eo.decay = 0.5;
    auto ema = std::make_shared<EMAWeightAveraging>(eo);
    auto rec = std::make_shared<Recorder>();
    auto o = quiet_options(temp_dir("ema_accum"));
    o.accumulate_grad_batches = 2;
    Trainer trainer(o, {ema, rec});
    trainer.fit(model, train);
    REQUIRE(rec->steps.size() == 8);  // batches
    CHECK(ema->n_averaged() == 4);    // optimizer steps
    CHECK(max_diff(weights(model), ema_of(rec->steps, 0.5, 1, 2)) < 1e-7);
  }
}

TEST_CASE("EMAWeightAveraging: floating buffers averaged (use_buffers) or copied, integer buffers copied",
          "[callbacks][weight_averaging][ema]") {
  /// A floating buffer that moves every step and an integer step counter.
  struct BufferModel : BoringModel {
    explicit BufferModel(BoringOptions o) : BoringModel(o) {
      level = register_buffer("level", torch::zeros({3}));
      count = register_buffer("count", torch::zeros({}, torch::kLong));
    }
    torch::Tensor training_step(const Batch& b, int64_t i) override {
      level.mul_(0.5).add_(b[0].mean(0).narrow(0, 0, 3));
      count.add_(1);
      return BoringModel::training_step(b, i);
    }
    torch::Tensor level, count;
  };
  struct Buffers : Callback {
    std::string state_key() const override { return "Buffers"; }
    void on_train_batch_end(Trainer&, LightningModule& m, const torch::Tensor&, const Batch&, int64_t) override {
      Weights w;
      for (auto& kv : m.named_buffers()) w[kv.key()] = kv.value().clone();
      steps.push_back(w);
    }
    std::vector<Weights> steps;
  };
  for (const bool use_buffers : {true, false}) {
    DYNAMIC_SECTION("use_buffers " << use_buffers) {
      torch::manual_seed(10);
      BufferModel model(small());
      DataLoader train = loader(32, 8);
      EMAWeightAveragingOptions eo;
      eo.decay = 0.5;
      eo.use_buffers = use_buffers;
      auto ema = std::make_shared<EMAWeightAveraging>(eo);
      auto rec = std::make_shared<Buffers>();
      Trainer trainer(quiet_options(temp_dir("ema_buffers")), {ema, rec});
      trainer.fit(model, train);
      REQUIRE(rec->steps.size() == 4);
      const Weights last = rec->steps.back();
      CHECK(model.count.item<int64_t>() == 4);  // copied, never averaged
      if (use_buffers) {
        std::vector<Weights> level;
        for (const auto& w : rec->steps) level.push_back({{"level", w.at("level")}});
        CHECK((model.level - ema_of(level, 0.5).at("level")).abs().max().item<double>() < 1e-7);
        CHECK((model.level - last.at("level")).abs().max().item<double>() > 1e-3);
      } else {
        CHECK(torch::equal(model.level, last.at("level")));
      }
    }
  }
}

TEST_CASE("StochasticWeightAveraging: SWALR's learning rates over the user's scheduler, the mean of the SWA epochs",
          "[callbacks][weight_averaging][swa]") {
  torch::manual_seed(6);
  StepLRModel model(small());
  DataLoader train = loader(32, 8);
  // SWA from the 2nd epoch (0-based 1), linear annealing over 2 epochs to 0.02.
  auto swa = std::make_shared<StochasticWeightAveraging>(swa_options(0.02, 2, 2, "linear"));
  auto rec = std::make_shared<Recorder>();
  auto o = quiet_options(temp_dir("swa"));
  o.max_epochs = 4;
  Trainer trainer(o, {swa, rec});
  trainer.fit(model, train);

  CHECK(swa->swa_start() == 1);
  CHECK(swa->swa_end() == 3);
  REQUIRE(rec->lrs.size() == 16);
  // Epoch 0: the user's StepLR halves the LR every step. SWA epochs: SWALR from the LR epoch 1
  // started with (0.1 / 2^4), with alpha 0, 1/2, 1.
  const double start = 0.1 / 16;
  for (int64_t i = 0; i < 16; ++i) {
    INFO("batch " << i);
    const int64_t epoch = i / 4;
    const double want = epoch == 0   ? 0.1 / std::pow(2.0, static_cast<double>(i))
                        : epoch == 1 ? start
                        : epoch == 2 ? 0.5 * 0.02 + 0.5 * start
                                     : 0.02;
    CHECK(rec->lrs[static_cast<size_t>(i)] == Approx(want).epsilon(1e-12));
  }
  REQUIRE(rec->epochs.size() == 4);
  CHECK(swa->n_averaged() == 3);
  CHECK(max_diff(weights(model), mean_of(rec->epochs, 1)) < 1e-7);
  CHECK(max_diff(weights(model), rec->epochs.back()) > 1e-5);
  CHECK(swa->averaged_numel() == 32 * 8 + 8 + 8 * 8 + 8 + 8 * 2 + 2);
}

TEST_CASE("StochasticWeightAveraging: the schedule is SWALR's, swa_epoch_start as Lightning reads it",
          "[callbacks][weight_averaging][swa]") {
  SECTION("closed form = SWALR's recurrence") {
    for (const std::string how : {"cos", "linear"}) {
      for (int64_t anneal : {0, 1, 4}) {
        StochasticWeightAveraging swa(swa_options(0.05, 1, anneal, how));
        auto f = [&](double t) { return how == "cos" ? (1 - std::cos(M_PI * t)) / 2 : t; };
        const double swa_lr = 0.05, lr0 = 0.3;
        // torch.optim.swa_utils.SWALR.get_lr, from its constructor's step on.
        double lr = lr0;
        for (int64_t step = 0; step < 7; ++step) {
          const int64_t s = anneal == 0 ? std::max<int64_t>(1, step) : step;
          const double denom = static_cast<double>(std::max<int64_t>(1, anneal));
          const double prev_alpha = f(std::clamp((static_cast<double>(s) - 1) / denom, 0.0, 1.0));
          const double prev_lr = prev_alpha == 1 ? swa_lr : (lr - prev_alpha * swa_lr) / (1 - prev_alpha);
          const double alpha = f(std::clamp(static_cast<double>(s) / denom, 0.0, 1.0));
          lr = swa_lr * alpha + prev_lr * (1 - alpha);
          INFO(how << " annealing_epochs " << anneal << " epoch " << step);
          CHECK(swa.swa_lr(step, 0, lr0) == Approx(lr).epsilon(1e-12));
        }
      }
    }
  }
  SECTION("a fraction of max_epochs") {
    torch::manual_seed(7);
    BoringModel model(small());
    DataLoader train = loader(16, 8);
    auto o = swa_options(0.05, 1, 1, "cos");
    o.swa_epoch_start = {0.6, true};
    auto swa = std::make_shared<StochasticWeightAveraging>(o);
    auto rec = std::make_shared<Recorder>();
    auto t = quiet_options(temp_dir("swa_fraction"));
    t.max_epochs = 5;
    Trainer trainer(t, {swa, rec});
    trainer.fit(model, train);
    CHECK(swa->swa_start() == 2);  // int(0.6 * 5) = 3, the 3rd epoch
    CHECK(swa->n_averaged() == 3);
    CHECK(max_diff(weights(model), mean_of(rec->epochs, 2)) < 1e-7);
  }
  SECTION("a fit stopped before SWA's last epoch keeps its trained weights") {
    torch::manual_seed(8);
    BoringModel model(small());
    DataLoader train = loader(16, 8);
    auto swa = std::make_shared<StochasticWeightAveraging>(swa_options(0.05, 1, 1, "cos"));
    auto rec = std::make_shared<Recorder>();
    auto t = quiet_options(temp_dir("swa_stopped"));
    t.max_epochs = 4;
    t.max_steps = 5;
    Trainer trainer(t, {swa, rec});
    trainer.fit(model, train);
    CHECK(swa->n_averaged() == 3);  // epochs 0, 1 and the 2nd's one step
    CHECK(max_diff(weights(model), rec->steps.back()) == 0.0);
  }
}

TEST_CASE("weight averaging: a fit resumed mid-epoch or at an epoch's last batch ends with the same weights",
          "[callbacks][weight_averaging][resume]") {
  struct Case {
    std::string name;
    std::function<std::shared_ptr<Callback>()> make;
  };
  const std::vector<Case> cases = {
      {"ema",
       [] {
         EMAWeightAveragingOptions eo;
         eo.decay = 0.6;
         eo.update_starting_at_epoch = 0;  // epoch-end updates too: the last batch's resume path
         return std::make_shared<EMAWeightAveraging>(eo);
       }},
      {"swa", [] { return std::make_shared<StochasticWeightAveraging>(swa_options(0.03, 2, 1, "cos")); }},
  };
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.name) {
      const std::string dir = temp_dir("wa_resume");
      auto run = [&](const std::string& ckpt, const std::string& ckpt_dir) {
        torch::manual_seed(9);
        StepLRModel model(small());
        DataLoader train = loader(32, 8, /*shuffle=*/true);
        DataLoader val = loader(8, 8);
        ModelCheckpointOptions mo;
        mo.dirpath = ckpt_dir;
        mo.every_n_train_steps = 1;
        mo.save_top_k = -1;
        mo.filename = "s{step}";
        mo.auto_insert_metric_name = false;
        mo.enable_version_counter = false;
        auto o = quiet_options(dir);
        o.enable_checkpointing = true;
        o.max_epochs = 3;
        // The averaging callback before ModelCheckpoint: a step's checkpoint holds its update.
        Trainer trainer(o, {c.make(), std::make_shared<ModelCheckpoint>(mo)});
        trainer.fit(model, train, &val, ckpt);
        return weights(model);
      };
      const Weights whole = run("", dir + "/ckpt");
      for (int64_t step : {4, 6, 8}) {  // the end of epoch 0, mid-epoch 1, epoch 1's last batch
        INFO("resumed from step " << step);
        const std::string ckpt = dir + "/ckpt/s" + std::to_string(step) + ".ckpt";
        CHECK(max_diff(run(ckpt, dir + "/resumed" + std::to_string(step)), whole) == 0.0);
      }
    }
  }
}

TEST_CASE(
    "weight averaging: fit's last.ckpt and an exception's checkpoint keep the trained weights and resume exactly, and "
    "the model takes the average when fit ends",
    "[callbacks][weight_averaging][resume]") {
  struct Case {
    std::string name;
    std::function<std::shared_ptr<Callback>()> make;
  };
  const std::vector<Case> cases = {
      {"ema steps",
       [] {
         EMAWeightAveragingOptions eo;
         eo.decay = 0.6;
         return std::make_shared<EMAWeightAveraging>(eo);
       }},
      {"ema epochs",
       [] {
         EMAWeightAveragingOptions eo;
         eo.decay = 0.6;
         eo.update_every_n_steps = 0;  // epoch-end updates only: an epoch cut short by max_steps
         eo.update_starting_at_epoch = 0;
         return std::make_shared<EMAWeightAveraging>(eo);
       }},
      {"swa", [] { return std::make_shared<StochasticWeightAveraging>(swa_options(0.03, 1, 1, "cos")); }},
  };
  /// Throws a TrainingError during the validation after step `at` (once).
  struct FailInValidation : Callback {
    int64_t at;
    bool done = false;
    explicit FailInValidation(int64_t a) : at(a) {}
    std::string state_key() const override { return "FailInValidation"; }
    void on_validation_batch_end(Trainer& t, LightningModule&, const Batch&, int64_t) override {
      if (t.sanity_checking() || done || t.global_step() != at) return;
      done = true;
      throw TrainingError("injected failure during validation");
    }
  };
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.name) {
      const std::string dir = temp_dir("wa_last");
      // 3 epochs of 4 steps, validating every 2 batches.
      auto run = [&](const std::string& root, int64_t max_steps, const std::string& ckpt,
                     std::vector<std::shared_ptr<Callback>> extra, bool averaging_first) {
        torch::manual_seed(9);
        StepLRModel model(small());
        DataLoader train = loader(32, 8, /*shuffle=*/true);
        DataLoader val = loader(8, 8);
        auto o = quiet_options(root);
        o.enable_checkpointing = true;
        o.max_epochs = 3;
        o.max_steps = max_steps;
        o.val_check_interval = BatchLimit::count(2);
        std::vector<std::shared_ptr<Callback>> cbs = std::move(extra);
        cbs.insert(averaging_first ? cbs.begin() : cbs.end(), c.make());
        Trainer trainer(o, cbs);
        try {
          trainer.fit(model, train, &val, ckpt);
        } catch (const TrainingError&) {
        }
        return weights(model);
      };
      const Weights whole = run(dir + "/whole", -1, "", {}, true);
      // Stopped by max_steps mid-epoch 1 (step 5, no validation there): last.ckpt is written at
      // fit's end and holds the trained weights; the stopped fit's model holds the average.
      const Weights stopped = run(dir + "/stop", 5, "", {}, true);
      const Checkpoint last = load_checkpoint_file(dir + "/stop/checkpoints/last.ckpt");
      CHECK(last.global_step == 5);
      Weights saved;
      for (const auto& [k, v] : last.state_dict) saved[k] = v;
      if (c.name != "swa") CHECK(max_diff(saved, stopped) > 1e-5);  // SWA averages only once it reached its end
      CHECK(max_diff(run(dir + "/stop", -1, "last", {}, true), whole) == 0.0);
      // An error during the validation after step 6, with OnExceptionCheckpoint before or after the
      // averaging callback: its checkpoint resumes as the others.
      for (const bool averaging_first : {true, false}) {
        INFO("averaging first: " << averaging_first);
        const std::string root = dir + (averaging_first ? "/fail_a" : "/fail_b");
        OnExceptionCheckpointOptions eo;
        eo.dirpath = root + "/exc";
        run(root, -1, "", {std::make_shared<OnExceptionCheckpoint>(eo), std::make_shared<FailInValidation>(6)},
            averaging_first);
        REQUIRE(fs::exists(root + "/exc/on_exception.ckpt"));
        CHECK(max_diff(run(root + "/again", -1, root + "/exc/on_exception.ckpt", {}, true), whole) == 0.0);
      }
    }
  }
}

TEST_CASE("weight averaging: options from YAML and refusals", "[callbacks][weight_averaging][options]") {
  auto swa_yaml = [](const std::string& text) {
    auto o = options_from_yaml<StochasticWeightAveragingOptions>(YAML::Load(text), "cb");
    o.validate("cb");
    return o;
  };
  auto o = swa_yaml("{swa_lrs: 0.05}");
  CHECK(o.swa_lrs.values == std::vector<double>{0.05});
  CHECK(o.swa_epoch_start.is_fraction);
  CHECK(o.swa_epoch_start.value == 0.8);
  CHECK(o.annealing_epochs == 10);
  CHECK(o.annealing_strategy == "cos");
  CHECK(o.device == std::optional<std::string>("cpu"));
  o = swa_yaml("{swa_lrs: [0.1, 0.2], swa_epoch_start: 3, device: null}");
  CHECK(o.swa_lrs.values == std::vector<double>{0.1, 0.2});
  CHECK_FALSE(o.swa_epoch_start.is_fraction);
  CHECK(o.swa_epoch_start.value == 3);
  CHECK_FALSE(o.device);
  CHECK(swa_yaml("{swa_lrs: 0.1, swa_epoch_start: 1.0}").swa_epoch_start.is_fraction);
  CHECK(options_to_yaml(swa_yaml("{swa_lrs: 0.1, swa_epoch_start: 1.0}"))["swa_epoch_start"].Scalar() == "1.0");
  CHECK_THROWS_WITH(swa_yaml("{}"), Contains("'cb.swa_lrs' is required"));
  CHECK_THROWS_WITH(swa_yaml("{swa_lrs: -1}"), Contains("cb.swa_lrs"));
  CHECK_THROWS_WITH(swa_yaml("{swa_lrs: 0.1, swa_epoch_start: 0}"), Contains("cb.swa_epoch_start"));
  CHECK_THROWS_WITH(swa_yaml("{swa_lrs: 0.1, swa_epoch_start: 1.5}"), Contains("cb.swa_epoch_start"));
  CHECK_THROWS_WITH(swa_yaml("{swa_lrs: 0.1, annealing_strategy: exp}"), Contains("cb.annealing_strategy"));
  CHECK_THROWS_WITH(swa_yaml("{swa_lrs: 0.1, device: toaster}"), Contains("cb.device"));

  auto e = options_from_yaml<EMAWeightAveragingOptions>(
      YAML::Load("{decay: 0.99, update_every_n_steps: 5, update_starting_at_step: 100}"), "ema");
  CHECK(e.decay == 0.99);
  CHECK(e.update_every_n_steps == 5);
  CHECK(e.update_starting_at_step == std::optional<int64_t>(100));
  CHECK_FALSE(e.update_starting_at_epoch);
  CHECK(EMAWeightAveragingOptions{}.decay == 0.999);
  e.decay = 1.5;
  CHECK_THROWS_WITH(e.validate("ema"), Contains("ema.decay"));

  SECTION("SWA refuses a model with BatchNorm, and several param-group LRs that do not match") {
    struct BnModel : BoringModel {
      explicit BnModel(BoringOptions o) : BoringModel(o) { bn = register_module("bn", torch::nn::BatchNorm1d(8)); }
      torch::nn::BatchNorm1d bn{nullptr};
    };
    torch::manual_seed(1);
    BnModel model(small());
    DataLoader train = loader(16, 8);
    Trainer trainer(quiet_options(temp_dir("swa_bn")),
                    {std::make_shared<StochasticWeightAveraging>(swa_options(0.05, 1, 1, "cos"))});
    CHECK_THROWS_AS(trainer.fit(model, train), ConfigError);
    BoringModel plain(small());
    auto two = swa_options(0.05, 1, 1, "cos");
    two.swa_lrs.values = {0.1, 0.2};
    Trainer t2(quiet_options(temp_dir("swa_groups")), {std::make_shared<StochasticWeightAveraging>(two)});
    CHECK_THROWS_WITH(t2.fit(plain, train), Contains("2 LRs for 1 param groups"));
  }
}

TEST_CASE("weight averaging callbacks are registered with the CLI under Lightning's names and defaults",
          "[callbacks][weight_averaging][cli]") {
  std::vector<std::string> log;
  CLI cli;
  register_toys(cli, &log);
  const YAML::Node r = cli.resolve(
      YAML::Load("model: ToyNet\ntrainer: {callbacks: [{class_path: EMAWeightAveraging, init_args: {decay: 0.9}}, "
                 "{class_path: StochasticWeightAveraging, init_args: {swa_lrs: 0.01}}, WeightAveraging]}"));
  const YAML::Node cbs = r["trainer"]["callbacks"];
  REQUIRE(cbs.size() == 3);
  CHECK(cbs[0]["init_args"]["decay"].as<double>() == 0.9);
  CHECK(cbs[0]["init_args"]["update_every_n_steps"].as<int64_t>() == 1);
  CHECK(cbs[0]["init_args"]["update_starting_at_step"].IsNull());
  CHECK(cbs[0]["init_args"]["use_buffers"].as<bool>());
  CHECK(cbs[1]["init_args"]["swa_lrs"].as<double>() == 0.01);
  CHECK(cbs[1]["init_args"]["swa_epoch_start"].Scalar() == "0.8");
  CHECK(cbs[1]["init_args"]["annealing_epochs"].as<int64_t>() == 10);
  CHECK(cbs[1]["init_args"]["annealing_strategy"].as<std::string>() == "cos");
  CHECK(cbs[1]["init_args"]["device"].as<std::string>() == "cpu");
  CHECK(cbs[2]["class_path"].as<std::string>() == "WeightAveraging");
  std::string error;
  try {
    cli.resolve(YAML::Load("model: ToyNet\ntrainer: {callbacks: [StochasticWeightAveraging]}"));
  } catch (const ConfigError& e) {
    error = e.what();
  }
  CHECK_THAT(error, Contains("trainer.callbacks[0]") && Contains("swa_lrs' is required"));
}
