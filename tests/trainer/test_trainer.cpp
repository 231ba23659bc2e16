#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "boring_model.h"
#include "volt/callbacks/callback.h"
#include "volt/core/errors.h"
#include "volt/trainer/lr_scheduler.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;

namespace {

/// A BoringModel built from a fixed global seed (Linear init draws from the global generator).
template <class M = BoringModel, class... Args>
std::shared_ptr<M> make_model(uint64_t seed, Args&&... args) {
  torch::manual_seed(seed);
  return std::make_shared<M>(std::forward<Args>(args)...);
}

DataLoader make_loader(int64_t n = 64, int64_t batch_size = 8, bool shuffle = false, uint64_t seed = 0) {
  DataLoaderOptions o;
  o.batch_size = batch_size;
  o.shuffle = shuffle;
  o.seed = seed;
  return DataLoader(std::make_shared<RandomDataset>(n), o);
}

std::vector<torch::Tensor> snapshot(torch::nn::Module& m) {
  std::vector<torch::Tensor> out;
  for (const auto& p : m.parameters()) out.push_back(p.detach().clone());
  return out;
}

bool all_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}

double max_abs_diff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, (a[i] - b[i]).abs().max().item<double>());
  return m;
}

double mean(const std::vector<double>& v, size_t begin, size_t end) {
  return std::accumulate(v.begin() + begin, v.begin() + end, 0.0) / static_cast<double>(end - begin);
}

/// metrics.csv as a header and rows of cells (empty cells kept).
struct Csv {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  int col(const std::string& name) const {
    for (size_t i = 0; i < header.size(); ++i)
      if (header[i] == name) return static_cast<int>(i);
    return -1;
  }
};
std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  std::string cell;
  std::stringstream ss(line);
  while (std::getline(ss, cell, ',')) out.push_back(cell);
  if (!line.empty() && line.back() == ',') out.push_back("");
  return out;
}
Csv read_csv(const std::string& path) {
  Csv c;
  std::ifstream in(path);
  std::string line;
  if (std::getline(in, line)) c.header = split(line);
  while (std::getline(in, line))
    if (!line.empty()) c.rows.push_back(split(line));
  return c;
}

/// The lr of the first param group at every training batch.
class LrRecorder : public Callback {
 public:
  std::string state_key() const override { return "LrRecorder"; }
  void on_train_batch_start(Trainer& t, LightningModule&, const Batch&, int64_t) override {
    lrs.push_back(t.optimizer()->param_groups()[0].options().get_lr());
  }
  std::vector<double> lrs;
};

/// Records every hook of the module in order.
class HookRecorder : public BoringModel {
 public:
  std::vector<std::string> calls;
  void configure_model() override { calls.push_back("configure_model"); }
  OptimizerConfig configure_optimizers() override {
    calls.push_back("configure_optimizers");
    return BoringModel::configure_optimizers();
  }
  torch::Tensor training_step(const Batch& b, int64_t i) override {
    calls.push_back("training_step");
    return BoringModel::training_step(b, i);
  }
  void validation_step(const Batch& b, int64_t i) override {
    calls.push_back("validation_step");
    BoringModel::validation_step(b, i);
  }
  void on_fit_start() override { calls.push_back("on_fit_start"); }
  void on_fit_end() override { calls.push_back("on_fit_end"); }
  void on_train_start() override { calls.push_back("on_train_start"); }
  void on_train_end() override { calls.push_back("on_train_end"); }
  void on_train_epoch_start() override { calls.push_back("on_train_epoch_start"); }
  void on_train_epoch_end() override { calls.push_back("on_train_epoch_end"); }
  void on_train_batch_start(const Batch&, int64_t) override { calls.push_back("on_train_batch_start"); }
  void on_train_batch_end(const torch::Tensor&, const Batch&, int64_t) override {
    calls.push_back("on_train_batch_end");
  }
  void on_validation_epoch_start() override { calls.push_back("on_validation_epoch_start"); }
  void on_validation_epoch_end() override { calls.push_back("on_validation_epoch_end"); }
  void on_before_backward(const torch::Tensor&) override { calls.push_back("on_before_backward"); }
  void on_after_backward() override { calls.push_back("on_after_backward"); }
  void on_before_optimizer_step(torch::optim::Optimizer&) override { calls.push_back("on_before_optimizer_step"); }
};

/// Counts validation runs (global step at each) and validation steps.
class ValCounter : public BoringModel {
 public:
  std::vector<int64_t> val_at_step;
  std::vector<int64_t> val_at_epoch;
  int64_t val_steps = 0;
  int64_t sanity_steps = 0;
  bool log_in_sanity = false;
  void on_validation_epoch_start() override {
    if (trainer()->sanity_checking()) return;
    val_at_step.push_back(trainer()->global_step());
    val_at_epoch.push_back(trainer()->current_epoch());
  }
  void validation_step(const Batch& b, int64_t i) override {
    if (trainer()->sanity_checking()) {
      ++sanity_steps;
      if (log_in_sanity) log("sanity_marker", 123.0);
    } else {
      ++val_steps;
    }
    BoringModel::validation_step(b, i);
  }
};

/// SGD with a StepLR scheduler on the given interval.
class ScheduledModel : public BoringModel {
 public:
  ScheduledModel(std::string interval, int64_t step_size, int64_t frequency = 1, double lr = 0.1)
      : interval_(std::move(interval)), step_size_(step_size), frequency_(frequency), lr_(lr) {}
  OptimizerConfig configure_optimizers() override {
    OptimizerConfig c;
    auto opt = std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(lr_));
    c.optimizer = opt;
    c.lr_scheduler = std::make_shared<StepLR>(*opt, step_size_, 0.5);
    c.interval = interval_;
    c.frequency = frequency_;
    return c;
  }

 private:
  std::string interval_;
  int64_t step_size_, frequency_;
  double lr_;
};

/// A module with only the required hooks: no validation_step, no test_step.
class TrainOnly : public LightningModule {
 public:
  TrainOnly() : LightningModule("TrainOnly") { fc = register_module("fc", torch::nn::Linear(32, 1)); }
  torch::Tensor training_step(const Batch& b, int64_t) override { return fc->forward(b[0]).pow(2).mean(); }
  OptimizerConfig configure_optimizers() override {
    OptimizerConfig c;
    c.optimizer = std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1));
    return c;
  }
  torch::nn::Linear fc{nullptr};
};

/// Gradients as the optimizer sees them in on_before_optimizer_step (before any clipping).
class GradProbe : public Callback {
 public:
  std::string state_key() const override { return "GradProbe"; }
  void on_before_optimizer_step(Trainer&, LightningModule& m, torch::optim::Optimizer&) override {
    double sq = 0;
    for (auto& p : m.parameters()) sq += p.grad().to(torch::kDouble).pow(2).sum().item<double>();
    norms.push_back(std::sqrt(sq));
  }
  std::vector<double> norms;
};

/// One manual SGD step of a BoringModel on a batch, with the gradient transformed by `clip`.
template <class Clip>
void manual_step(BoringModel& m, const Batch& batch, double lr, Clip clip) {
  auto out = m.forward(batch[0]);
  torch::mse_loss(out, torch::ones_like(out)).backward();
  std::vector<torch::Tensor> grads;
  for (auto& p : m.parameters()) grads.push_back(p.grad().clone());
  clip(grads);
  torch::NoGradGuard ng;
  auto params = m.parameters();
  for (size_t i = 0; i < params.size(); ++i) params[i].sub_(lr * grads[i]);
}

}  // namespace

TEST_CASE("BoringModel trains: the loss goes down", "[trainer]") {
  auto m = make_model(0);
  auto opts = quiet_options(temp_dir("trainer-loss"));
  opts.max_epochs = 5;
  Trainer t(opts);
  auto dl = make_loader();
  const auto before = snapshot(*m);
  t.fit(*m, dl);
  REQUIRE(m->losses.size() == 40);
  CHECK(t.global_step() == 40);
  CHECK(t.current_epoch() == 5);
  CHECK(t.num_training_batches() == 8);
  const double first = mean(m->losses, 0, 8), last = mean(m->losses, 32, 40);
  INFO("first epoch " << first << ", last epoch " << last);
  CHECK(last < 0.5 * first);
  CHECK_FALSE(all_equal(before, snapshot(*m)));
  // The last logged step value is the last loss.
  REQUIRE(t.callback_metrics().count("train_loss"));
  CHECK(t.callback_metrics().at("train_loss") == Approx(m->losses.back()));
  CHECK(t.progress_bar_metrics().count("train_loss"));
  // The module is detached from the trainer's training state afterwards but keeps working.
  CHECK(m->forward(torch::zeros({1, 32})).sizes() == torch::IntArrayRef({1, 2}));
}

TEST_CASE("max_steps stops exactly at that global step", "[trainer]") {
  for (int64_t max_steps : {1, 5, 13, 16}) {
    INFO("max_steps " << max_steps);
    auto m = make_model(0);
    auto opts = quiet_options(temp_dir("trainer-maxsteps"));
    opts.max_epochs = -1;
    opts.max_steps = max_steps;
    Trainer t(opts);
    auto dl = make_loader();
    t.fit(*m, dl);
    CHECK(t.global_step() == max_steps);
    CHECK(static_cast<int64_t>(m->losses.size()) == max_steps);
  }
  // max_epochs wins when it comes first.
  auto m = make_model(0);
  auto opts = quiet_options(temp_dir("trainer-maxsteps"));
  opts.max_epochs = 2;
  opts.max_steps = 100;
  Trainer t(opts);
  auto dl = make_loader();
  t.fit(*m, dl);
  CHECK(t.global_step() == 16);
}

TEST_CASE("accumulate_grad_batches equals a doubled batch", "[trainer]") {
  auto accum = make_model(1);
  auto big = make_model(1);
  const auto init = snapshot(*accum);
  {
    auto opts = quiet_options(temp_dir("trainer-accum"));
    opts.accumulate_grad_batches = 2;
    Trainer t(opts);
    auto dl = make_loader(64, 8);
    t.fit(*accum, dl);
    CHECK(t.global_step() == 4);  // 8 batches / 2
    CHECK(accum->losses.size() == 8);
  }
  {
    auto opts = quiet_options(temp_dir("trainer-accum"));
    Trainer t(opts);
    auto dl = make_loader(64, 16);
    t.fit(*big, dl);
    CHECK(t.global_step() == 4);
  }
  CHECK(max_abs_diff(init, snapshot(*accum)) > 1e-3);  // it trained
  CHECK(max_abs_diff(snapshot(*accum), snapshot(*big)) < 1e-6);

  // A last partial accumulation still steps (7 batches, accumulate 2: 4 steps).
  auto m = make_model(1);
  auto opts = quiet_options(temp_dir("trainer-accum"));
  opts.accumulate_grad_batches = 2;
  opts.limit_train_batches = BatchLimit::count(7);
  opts.max_epochs = 2;
  Trainer t(opts);
  auto dl = make_loader(64, 8);
  t.fit(*m, dl);
  CHECK(t.global_step() == 8);
  CHECK(m->losses.size() == 14);
}

TEST_CASE("gradient clipping by norm caps the update", "[trainer]") {
  const double clip = 0.05, lr = 0.1;
  auto m = make_model(2);
  auto ref = make_model(2);
  const auto init = snapshot(*m);
  auto probe = std::make_shared<GradProbe>();
  auto opts = quiet_options(temp_dir("trainer-clip"));
  opts.max_steps = 1;
  opts.gradient_clip_val = clip;
  Trainer t(opts, {probe});
  auto dl = make_loader();
  t.fit(*m, dl);
  REQUIRE(probe->norms.size() == 1);
  // Clipping happens after on_before_optimizer_step: the probe saw the raw norm, larger than clip.
  REQUIRE(probe->norms[0] > 10 * clip);

  manual_step(*ref, dl.batch(0), lr, [&](std::vector<torch::Tensor>& g) {
    double sq = 0;
    for (auto& x : g) sq += x.to(torch::kDouble).pow(2).sum().item<double>();
    const double total = std::sqrt(sq);
    CHECK(total == Approx(probe->norms[0]).epsilon(1e-5));
    const double coef = clip / (total + 1e-6);  // torch.nn.utils.clip_grad_norm_
    for (auto& x : g) x.mul_(coef);
  });
  CHECK(max_abs_diff(snapshot(*m), snapshot(*ref)) < 1e-7);

  // The step taken has norm lr * clip.
  double sq = 0;
  auto after = snapshot(*m);
  for (size_t i = 0; i < after.size(); ++i) sq += (after[i] - init[i]).to(torch::kDouble).pow(2).sum().item<double>();
  CHECK(std::sqrt(sq) == Approx(lr * clip).epsilon(1e-3));
}

TEST_CASE("gradient clipping by value clamps each gradient", "[trainer]") {
  const double clip = 1e-3, lr = 0.1;
  auto m = make_model(3);
  auto ref = make_model(3);
  auto unclipped = make_model(3);
  const auto init = snapshot(*m);
  auto opts = quiet_options(temp_dir("trainer-clipv"));
  opts.max_steps = 1;
  opts.gradient_clip_val = clip;
  opts.gradient_clip_algorithm = "value";
  Trainer t(opts);
  auto dl = make_loader();
  t.fit(*m, dl);
  manual_step(*ref, dl.batch(0), lr, [&](std::vector<torch::Tensor>& g) {
    for (auto& x : g) x.clamp_(-clip, clip);
  });
  manual_step(*unclipped, dl.batch(0), lr, [](std::vector<torch::Tensor>&) {});
  CHECK(max_abs_diff(snapshot(*m), snapshot(*ref)) < 1e-7);
  CHECK(max_abs_diff(snapshot(*m), snapshot(*unclipped)) > 1e-4);  // clipping mattered
  CHECK(max_abs_diff(init, snapshot(*m)) <= lr * clip * (1 + 1e-4));
}

TEST_CASE("limit_train_batches as a count and as a fraction", "[trainer]") {
  struct Case {
    BatchLimit limit;
    int64_t per_epoch;
  };
  for (auto c : {Case{BatchLimit::count(3), 3}, Case{BatchLimit::fraction(0.5), 4}, Case{BatchLimit::fraction(0.3), 2},
                 Case{BatchLimit::count(100), 8}}) {
    INFO("limit " << c.limit.value << (c.limit.is_fraction ? " (fraction)" : " (count)"));
    auto m = make_model<HookRecorder>(0);
    auto opts = quiet_options(temp_dir("trainer-limit"));
    opts.max_epochs = 2;
    opts.limit_train_batches = c.limit;
    Trainer t(opts);
    auto dl = make_loader();
    t.fit(*m, dl);
    CHECK(t.global_step() == 2 * c.per_epoch);
    CHECK(t.num_training_batches() == c.per_epoch);
    CHECK(static_cast<int64_t>(m->losses.size()) == 2 * c.per_epoch);
  }
  // Limiting to zero batches is an error that says why.
  auto m = make_model(0);
  auto opts = quiet_options(temp_dir("trainer-limit"));
  opts.limit_train_batches = BatchLimit::count(0);
  Trainer t(opts);
  auto dl = make_loader();
  CHECK_THROWS_AS(t.fit(*m, dl), ConfigError);
}

TEST_CASE("validation runs at val_check_interval and check_val_every_n_epoch", "[trainer][validation]") {
  auto run = [](auto configure, int64_t max_epochs) {
    auto m = make_model<ValCounter>(0);
    auto opts = quiet_options(temp_dir("trainer-val"));
    opts.max_epochs = max_epochs;
    configure(opts);
    Trainer t(opts);
    auto train = make_loader(64, 8);  // 8 batches
    auto val = make_loader(32, 8);    // 4 batches
    t.fit(*m, train, &val);
    return m;
  };
  SECTION("default: once at the end of every epoch") {
    auto m = run([](TrainerOptions&) {}, 2);
    CHECK(m->val_at_step == std::vector<int64_t>{8, 16});
    CHECK(m->val_steps == 8);
  }
  SECTION("a fraction of the epoch") {
    auto m = run([](TrainerOptions& o) { o.val_check_interval = BatchLimit::fraction(0.25); }, 1);
    CHECK(m->val_at_step == std::vector<int64_t>{2, 4, 6, 8});
  }
  SECTION("a batch count") {
    auto m = run([](TrainerOptions& o) { o.val_check_interval = BatchLimit::count(3); }, 2);
    CHECK(m->val_at_step == std::vector<int64_t>{3, 6, 11, 14});
  }
  SECTION("every second epoch") {
    auto m = run([](TrainerOptions& o) { o.check_val_every_n_epoch = 2; }, 4);
    CHECK(m->val_at_epoch == std::vector<int64_t>{1, 3});
    CHECK(m->val_at_step == std::vector<int64_t>{16, 32});
  }
  SECTION("limit_val_batches") {
    auto m = run([](TrainerOptions& o) { o.limit_val_batches = BatchLimit::count(2); }, 1);
    CHECK(m->val_steps == 2);
    auto f = run([](TrainerOptions& o) { o.limit_val_batches = BatchLimit::fraction(0.75); }, 1);
    CHECK(f->val_steps == 3);
    auto none = run([](TrainerOptions& o) { o.limit_val_batches = BatchLimit::count(0); }, 1);
    CHECK(none->val_at_step.empty());
  }
}

TEST_CASE("a batch-count val_check_interval still honours check_val_every_n_epoch", "[trainer][validation]") {
  // Lightning (_should_check_val_epoch): validation only runs in epochs where
  // (epoch + 1) % check_val_every_n_epoch == 0, whatever val_check_interval is.
  auto m = make_model<ValCounter>(0);
  auto opts = quiet_options(temp_dir("trainer-val"));
  opts.max_epochs = 2;
  opts.val_check_interval = BatchLimit::count(4);
  opts.check_val_every_n_epoch = 2;
  Trainer t(opts);
  auto train = make_loader(64, 8);
  auto val = make_loader(32, 8);
  t.fit(*m, train, &val);
  CHECK(m->val_at_epoch == std::vector<int64_t>{1, 1});
  CHECK(m->val_at_step == std::vector<int64_t>{12, 16});
}

TEST_CASE("sanity validation steps run but log nothing", "[trainer][validation]") {
  auto m = make_model<ValCounter>(0);
  m->log_in_sanity = true;
  auto opts = quiet_options(temp_dir("trainer-sanity"));
  opts.num_sanity_val_steps = 2;
  opts.limit_train_batches = BatchLimit::count(2);
  opts.log_every_n_steps = 1;
  Trainer t(opts);
  auto train = make_loader(64, 8);
  auto val = make_loader(32, 8);  // 4 batches
  t.fit(*m, train, &val);
  CHECK(m->sanity_steps == 2);
  CHECK(m->val_steps == 4);
  CHECK(m->val_at_step == std::vector<int64_t>{2});  // the sanity check is not a validation epoch
  CHECK(t.callback_metrics().count("sanity_marker") == 0);

  // val_loss is the mean over the 4 real validation batches only.
  double expected = 0;
  {
    torch::NoGradGuard ng;
    m->eval();
    for (int64_t i = 0; i < 4; ++i) {
      auto out = m->forward(val.batch(i)[0]);
      expected += torch::mse_loss(out, torch::ones_like(out)).item<double>() / 4.0;
    }
  }
  REQUIRE(t.callback_metrics().count("val_loss"));
  CHECK(t.callback_metrics().at("val_loss") == Approx(expected).epsilon(1e-6));

  auto csv = read_csv(t.log_dir() + "/metrics.csv");
  CHECK(csv.col("sanity_marker") == -1);
  CHECK(csv.col("val_loss") >= 0);
  CHECK(csv.col("train_loss") >= 0);

  // -1: the whole validation set.
  auto all = make_model<ValCounter>(0);
  opts.num_sanity_val_steps = -1;
  opts.default_root_dir = temp_dir("trainer-sanity");
  Trainer t2(opts);
  t2.fit(*all, train, &val);
  CHECK(all->sanity_steps == 4);
  // Sanity steps do not change the model (same result as without them).
  auto none = make_model<ValCounter>(0);
  opts.num_sanity_val_steps = 0;
  opts.default_root_dir = temp_dir("trainer-sanity");
  Trainer t3(opts);
  t3.fit(*none, train, &val);
  CHECK(none->sanity_steps == 0);
  CHECK(all_equal(snapshot(*all), snapshot(*none)));
}

TEST_CASE("hooks are called in Lightning's order", "[trainer][hooks]") {
  auto m = make_model<HookRecorder>(0);
  auto opts = quiet_options(temp_dir("trainer-hooks"));
  opts.limit_train_batches = BatchLimit::count(2);
  Trainer t(opts);
  auto dl = make_loader();
  t.fit(*m, dl);
  const std::vector<std::string> batch = {"on_train_batch_start",     "training_step",     "on_before_backward",
                                          "on_after_backward",        "on_before_optimizer_step",
                                          "on_train_batch_end"};
  std::vector<std::string> expected = {"configure_model", "configure_optimizers", "on_fit_start", "on_train_start",
                                       "on_train_epoch_start"};
  for (int i = 0; i < 2; ++i) expected.insert(expected.end(), batch.begin(), batch.end());
  for (auto s : {"on_train_epoch_end", "on_train_end", "on_fit_end"}) expected.push_back(s);
  CHECK(m->calls == expected);
}

TEST_CASE("hooks with accumulation and end-of-epoch validation", "[trainer][hooks]") {
  auto m = make_model<HookRecorder>(0);
  auto opts = quiet_options(temp_dir("trainer-hooks"));
  opts.limit_train_batches = BatchLimit::count(2);
  opts.limit_val_batches = BatchLimit::count(1);
  opts.accumulate_grad_batches = 2;
  Trainer t(opts);
  auto dl = make_loader();
  auto val = make_loader(16, 8);
  t.fit(*m, dl, &val);
  const std::vector<std::string> expected = {
      "configure_model", "configure_optimizers", "on_fit_start", "on_train_start", "on_train_epoch_start",
      // micro-batch 0: no optimizer step
      "on_train_batch_start", "training_step", "on_before_backward", "on_after_backward", "on_train_batch_end",
      // micro-batch 1: the step
      "on_train_batch_start", "training_step", "on_before_backward", "on_after_backward",
      "on_before_optimizer_step", "on_train_batch_end",
      // validation at the end of the epoch, before on_train_epoch_end
      "on_validation_epoch_start", "validation_step", "on_validation_epoch_end",
      "on_train_epoch_end", "on_train_end", "on_fit_end"};
  CHECK(m->calls == expected);
}

TEST_CASE("the sanity check calls the validation epoch hooks, as Lightning's", "[trainer][hooks]") {
  // Lightning runs the sanity check through the validation loop, hooks included
  // (on_validation_epoch_start/end are called with trainer.sanity_checking == True).
  auto m = make_model<HookRecorder>(0);
  auto opts = quiet_options(temp_dir("trainer-hooks"));
  opts.limit_train_batches = BatchLimit::count(1);
  opts.limit_val_batches = BatchLimit::count(1);
  opts.num_sanity_val_steps = 1;
  Trainer t(opts);
  auto dl = make_loader();
  auto val = make_loader(16, 8);
  t.fit(*m, dl, &val);
  const std::vector<std::string> expected = {
      "configure_model", "configure_optimizers", "on_fit_start",
      "on_validation_epoch_start", "validation_step", "on_validation_epoch_end",  // sanity check
      "on_train_start", "on_train_epoch_start", "on_train_batch_start", "training_step", "on_before_backward",
      "on_after_backward", "on_before_optimizer_step", "on_train_batch_end", "on_validation_epoch_start",
      "validation_step", "on_validation_epoch_end", "on_train_epoch_end", "on_train_end", "on_fit_end"};
  CHECK(m->calls == expected);
}

TEST_CASE("StepLR with interval step vs epoch", "[trainer][lr_scheduler]") {
  auto run = [](std::shared_ptr<ScheduledModel> m, int64_t epochs, int64_t batches, int64_t accumulate = 1) {
    auto rec = std::make_shared<LrRecorder>();
    auto opts = quiet_options(temp_dir("trainer-sched"));
    opts.max_epochs = epochs;
    opts.limit_train_batches = BatchLimit::count(batches);
    opts.accumulate_grad_batches = accumulate;
    Trainer t(opts, {rec});
    auto dl = make_loader();
    t.fit(*m, dl);
    return rec->lrs;
  };
  auto expect = [](const std::vector<double>& got, const std::vector<double>& want) {
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      INFO("batch " << i);
      CHECK(got[i] == Approx(want[i]).epsilon(1e-12));
    }
  };
  SECTION("step: lr = 0.1 * 0.5^(step // 2)") {
    expect(run(make_model<ScheduledModel>(0, "step", 2), 1, 8), {0.1, 0.1, 0.05, 0.05, 0.025, 0.025, 0.0125, 0.0125});
  }
  SECTION("epoch: stepped once per epoch") {
    expect(run(make_model<ScheduledModel>(0, "epoch", 1), 3, 2), {0.1, 0.1, 0.05, 0.05, 0.025, 0.025});
  }
  SECTION("step with frequency 2") {
    expect(run(make_model<ScheduledModel>(0, "step", 1, 2), 1, 6), {0.1, 0.1, 0.05, 0.05, 0.025, 0.025});
  }
  SECTION("step counts optimizer steps, not batches, with accumulation") {
    expect(run(make_model<ScheduledModel>(0, "step", 1), 1, 6, 2), {0.1, 0.1, 0.05, 0.05, 0.025, 0.025});
  }
  SECTION("a bad interval is a ConfigError") {
    auto m = make_model<ScheduledModel>(0, "batch", 1);
    auto opts = quiet_options(temp_dir("trainer-sched"));
    Trainer t(opts);
    auto dl = make_loader();
    CHECK_THROWS_AS(t.fit(*m, dl), ConfigError);
  }
}

TEST_CASE("LR schedulers follow PyTorch's formulas", "[trainer][lr_scheduler]") {
  torch::nn::Linear a(2, 2), b(2, 2);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(a->parameters(), std::make_unique<torch::optim::SGDOptions>(1.0));
  groups.emplace_back(b->parameters(), std::make_unique<torch::optim::SGDOptions>(0.5));
  torch::optim::SGD opt(groups, torch::optim::SGDOptions(1.0));

  SECTION("StepLR, every param group from its own base") {
    StepLR s(opt, 3, 0.1);
    std::vector<std::vector<double>> seen;
    for (int e = 0; e < 7; ++e) {
      seen.push_back(s.current_lrs());
      s.step();
    }
    for (int e = 0; e < 7; ++e) {
      CHECK(seen[e][0] == Approx(std::pow(0.1, e / 3)));
      CHECK(seen[e][1] == Approx(0.5 * std::pow(0.1, e / 3)));
    }
    CHECK(s.last_epoch() == 7);
    s.set_last_epoch(3);
    CHECK(s.current_lrs()[0] == Approx(0.1));
  }
  SECTION("CosineAnnealingLR") {
    CosineAnnealingLR s(opt, 4, 0.1);
    for (int e = 1; e <= 6; ++e) {
      s.step();
      const double t = std::min(e, 4) / 4.0;
      CHECK(s.current_lrs()[0] == Approx(0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * t))));
    }
  }
  SECTION("LambdaLR applies fn(0) at construction, as PyTorch's") {
    // torch.optim.lr_scheduler.LambdaLR(opt, lambda e: 0.1 * (e + 1)) sets lr = base * 0.1 at once:
    // the first optimizer step of a warm-up runs with the warm-up lr, not the base lr.
    LambdaLR s(opt, [](int64_t e) { return 0.1 * static_cast<double>(e + 1); });
    CHECK(s.current_lrs()[0] == Approx(0.1));
    CHECK(s.current_lrs()[1] == Approx(0.05));
    s.step();
    CHECK(s.current_lrs()[0] == Approx(0.2));
    CHECK(s.current_lrs()[1] == Approx(0.1));
  }
  CHECK_THROWS_AS(StepLR(opt, 0), ConfigError);
  CHECK_THROWS_AS(CosineAnnealingLR(opt, 0), ConfigError);
}

TEST_CASE("a val loader without validation_step is a ConfigError", "[trainer][validation]") {
  for (int64_t sanity : {0, 2}) {
    torch::manual_seed(0);
    auto m = std::make_shared<TrainOnly>();
    auto opts = quiet_options(temp_dir("trainer-noval"));
    opts.num_sanity_val_steps = sanity;
    opts.limit_train_batches = BatchLimit::count(2);
    Trainer t(opts);
    auto dl = make_loader();
    auto val = make_loader(16, 8);
    try {
      t.fit(*m, dl, &val);
      FAIL("fit did not throw");
    } catch (const ConfigError& e) {
      CHECK_THAT(e.what(), Catch::Matchers::Contains("validation_step"));
    }
  }
  // Without a val loader it trains fine; validate/test without the hooks fail the same way.
  auto m = std::make_shared<TrainOnly>();
  auto opts = quiet_options(temp_dir("trainer-noval"));
  Trainer t(opts);
  auto dl = make_loader();
  CHECK_NOTHROW(t.fit(*m, dl));
  Trainer t2(quiet_options(temp_dir("trainer-noval")));
  try {
    t2.test(*m, dl);
    FAIL("test did not throw");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Catch::Matchers::Contains("test_step"));
  }
  Trainer t3(quiet_options(temp_dir("trainer-noval")));
  CHECK_THROWS_AS(t3.validate(*m, dl), ConfigError);
}

TEST_CASE("validate and test return the epoch metrics", "[trainer][validation]") {
  auto m = make_model(0);
  auto dl = make_loader(32, 8);
  double expected = 0;
  {
    torch::NoGradGuard ng;
    for (int64_t i = 0; i < 4; ++i) {
      auto out = m->forward(dl.batch(i)[0]);
      expected += torch::mse_loss(out, torch::ones_like(out)).item<double>() / 4.0;
    }
  }
  Trainer t(quiet_options(temp_dir("trainer-eval")));
  auto v = t.validate(*m, dl);
  REQUIRE(v.count("val_loss"));
  CHECK(v.at("val_loss") == Approx(expected).epsilon(1e-6));
  auto r = t.test(*m, dl);
  REQUIRE(r.count("test_loss"));
  CHECK(r.at("test_loss") == Approx(expected).epsilon(1e-6));
}

namespace {

struct ResumeCase {
  bool shuffle;
  bool adam;
  int64_t first;   // steps before the checkpoint
  int64_t total;   // steps after resuming
};

/// A run of `total` steps equals `first` steps, saved, then resumed in a fresh trainer and a model
/// that starts from other weights. 80 samples / 8 = 10 batches per epoch.
void check_resume(const ResumeCase& c) {
  INFO("shuffle " << c.shuffle << " adam " << c.adam << " first " << c.first << " total " << c.total);
  BoringOptions bo;
  bo.adam = c.adam;
  bo.lr = c.adam ? 0.01 : 0.1;
  auto opts_for = [](int64_t steps) {
    auto o = quiet_options(temp_dir("trainer-resume"));
    o.max_epochs = -1;
    o.max_steps = steps;
    return o;
  };

  auto full = make_model(5, bo);
  int64_t full_epoch = -1;
  {
    Trainer t(opts_for(c.total));
    auto dl = make_loader(80, 8, c.shuffle, 99);
    t.fit(*full, dl);
    REQUIRE(t.global_step() == c.total);
    full_epoch = t.current_epoch();
  }
  auto part = make_model(5, bo);
  const std::string ckpt = temp_dir("trainer-resume") + "/mid.ckpt";
  {
    Trainer t(opts_for(c.first));
    auto dl = make_loader(80, 8, c.shuffle, 99);
    t.fit(*part, dl);
    REQUIRE(t.global_step() == c.first);
    t.save_checkpoint(ckpt);
  }
  auto resumed = make_model(77, bo);  // other initial weights: the checkpoint must overwrite them
  REQUIRE_FALSE(all_equal(snapshot(*resumed), snapshot(*part)));
  Trainer t(opts_for(c.total));
  auto dl = make_loader(80, 8, c.shuffle, 99);
  t.fit(*resumed, dl, nullptr, ckpt);
  CHECK(t.global_step() == c.total);
  CHECK(t.current_epoch() == full_epoch);
  // Same batches, in the same order, after the resume point.
  CHECK(resumed->losses == std::vector<double>(full->losses.begin() + c.first, full->losses.end()));
  CHECK(all_equal(snapshot(*resumed), snapshot(*full)));
}

}  // namespace

TEST_CASE("save_checkpoint + fit(ckpt_path) resumes exactly", "[trainer][resume]") {
  for (bool shuffle : {false, true})
    for (bool adam : {false, true}) {
      check_resume({shuffle, adam, 3, 6});    // mid-epoch to mid-epoch
      check_resume({shuffle, adam, 3, 15});   // mid-epoch into the next epoch
      check_resume({shuffle, adam, 10, 15});  // from an epoch boundary
    }
}

TEST_CASE("resume restores a step-interval scheduler", "[trainer][resume][lr_scheduler]") {
  auto run = [](std::shared_ptr<ScheduledModel> m, int64_t steps, const std::string& ckpt_in,
                const std::string& ckpt_out) {
    auto rec = std::make_shared<LrRecorder>();
    auto o = quiet_options(temp_dir("trainer-resume-sched"));
    o.max_epochs = -1;
    o.max_steps = steps;
    Trainer t(o, {rec});
    auto dl = make_loader(80, 8, true, 1);
    t.fit(*m, dl, nullptr, ckpt_in);
    if (!ckpt_out.empty()) t.save_checkpoint(ckpt_out);
    return rec->lrs;
  };
  const std::string ckpt = temp_dir("trainer-resume-sched") + "/s.ckpt";
  auto full = make_model<ScheduledModel>(4, "step", 2);
  auto lr_full = run(full, 13, "", "");
  auto part = make_model<ScheduledModel>(4, "step", 2);
  run(part, 5, "", ckpt);
  auto resumed = make_model<ScheduledModel>(8, "step", 2);
  auto lr_resumed = run(resumed, 13, ckpt, "");
  CHECK(lr_resumed == std::vector<double>(lr_full.begin() + 5, lr_full.end()));
  CHECK(all_equal(snapshot(*resumed), snapshot(*full)));
}

TEST_CASE("resume from an end-of-epoch last.ckpt keeps an epoch-interval scheduler in step",
          "[trainer][resume][lr_scheduler]") {
  // ModelCheckpoint saves last.ckpt in on_train_epoch_end; the epoch scheduler steps after that hook
  // (as in Lightning). Resuming from that file must still train epoch 1 with the epoch-1 lr.
  auto rec_full = std::make_shared<LrRecorder>();
  auto full = make_model<ScheduledModel>(6, "epoch", 1);
  {
    auto o = quiet_options(temp_dir("trainer-resume-epoch"));
    o.max_epochs = 3;
    o.limit_train_batches = BatchLimit::count(2);
    Trainer t(o, {rec_full});
    auto dl = make_loader();
    t.fit(*full, dl);
  }
  REQUIRE(rec_full->lrs.size() == 6);

  const std::string root = temp_dir("trainer-resume-epoch");
  auto o = quiet_options(root);
  o.limit_train_batches = BatchLimit::count(2);
  o.enable_checkpointing = true;  // the default ModelCheckpoint keeps last.ckpt
  {
    auto part = make_model<ScheduledModel>(6, "epoch", 1);
    o.max_epochs = 1;
    Trainer t(o);
    auto dl = make_loader();
    t.fit(*part, dl);
  }
  REQUIRE(fs::exists(root + "/checkpoints/last.ckpt"));
  auto rec = std::make_shared<LrRecorder>();
  auto resumed = make_model<ScheduledModel>(9, "epoch", 1);
  o.max_epochs = 3;
  Trainer t(o, {rec});
  auto dl = make_loader();
  t.fit(*resumed, dl, nullptr, "last");
  CHECK(t.global_step() == 6);
  CHECK(rec->lrs == std::vector<double>(rec_full->lrs.begin() + 2, rec_full->lrs.end()));
  CHECK(all_equal(snapshot(*resumed), snapshot(*full)));
}

TEST_CASE("resuming a checkpoint of another model is a CheckpointError", "[trainer][resume]") {
  const std::string root = temp_dir("trainer-resume-other");
  auto m = make_model(0);
  Trainer t(quiet_options(root));
  auto dl = make_loader();
  t.fit(*m, dl);
  t.save_checkpoint(root + "/a.ckpt");
  BoringOptions narrow;
  narrow.hidden = 16;
  auto other = make_model(0, narrow);
  Trainer t2(quiet_options(root));
  CHECK_THROWS_AS(t2.fit(*other, dl, nullptr, root + "/a.ckpt"), CheckpointError);
  Trainer t3(quiet_options(root));
  CHECK_THROWS_AS(t3.fit(*make_model(0), dl, nullptr, root + "/missing.ckpt"), CheckpointError);
}

TEST_CASE("log_every_n_steps writes rows at steps n-1, 2n-1, ...", "[trainer]") {
  auto m = make_model(0);
  auto opts = quiet_options(temp_dir("trainer-logsteps"));
  opts.log_every_n_steps = 2;
  Trainer t(opts);
  auto dl = make_loader();
  t.fit(*m, dl);
  auto csv = read_csv(t.log_dir() + "/metrics.csv");
  const int step = csv.col("step"), loss = csv.col("train_loss");
  REQUIRE(step >= 0);
  REQUIRE(loss >= 0);
  std::vector<std::string> steps;
  for (auto& r : csv.rows)
    if (loss < static_cast<int>(r.size()) && !r[loss].empty()) {
      steps.push_back(r[step]);
      const int64_t s = std::stoll(r[step]);
      CHECK(std::stod(r[loss]) == Approx(m->losses[s]).epsilon(1e-6));
    }
  CHECK(steps == std::vector<std::string>{"1", "3", "5", "7"});
}

namespace {
/// Logs a metric per step and per epoch: m = 10 * batch_idx.
class StepEpochLogger : public BoringModel {
 public:
  torch::Tensor training_step(const Batch& b, int64_t i) override {
    LogOptions o;
    o.on_step = true;
    o.on_epoch = true;
    log("m", 10.0 * static_cast<double>(i), o);
    LogOptions e;
    e.on_epoch = true;
    e.on_step = false;
    log("only_epoch", static_cast<double>(i), e);
    return BoringModel::training_step(b, i);
  }
};
}  // namespace

TEST_CASE("on_step and on_epoch logging give _step and _epoch metrics", "[trainer][logging]") {
  auto m = make_model<StepEpochLogger>(0);
  auto opts = quiet_options(temp_dir("trainer-log"));
  opts.limit_train_batches = BatchLimit::count(4);
  opts.log_every_n_steps = 1;
  Trainer t(opts);
  auto dl = make_loader();
  t.fit(*m, dl);
  const auto& cm = t.callback_metrics();
  REQUIRE(cm.count("m_step"));
  REQUIRE(cm.count("m_epoch"));
  CHECK(cm.at("m_step") == Approx(30.0));                     // the last step
  CHECK(cm.at("m_epoch") == Approx((0 + 10 + 20 + 30) / 4.0));  // the epoch mean
  CHECK(cm.at("m") == Approx(15.0));                          // after the epoch: the epoch value
  REQUIRE(cm.count("only_epoch"));
  CHECK(cm.at("only_epoch") == Approx(1.5));
  CHECK(cm.count("only_epoch_step") == 0);

  auto csv = read_csv(t.log_dir() + "/metrics.csv");
  CHECK(csv.col("m_step") >= 0);
  CHECK(csv.col("m_epoch") >= 0);
  CHECK(csv.col("only_epoch") >= 0);
  CHECK(csv.col("m") == -1);
  // One epoch row with m_epoch and only_epoch.
  int epoch_rows = 0;
  for (auto& r : csv.rows) {
    const int c = csv.col("m_epoch");
    if (c < static_cast<int>(r.size()) && !r[c].empty()) {
      ++epoch_rows;
      CHECK(std::stod(r[c]) == Approx(15.0));
      CHECK(std::stod(r[csv.col("only_epoch")]) == Approx(1.5));
    }
  }
  CHECK(epoch_rows == 1);
}

namespace {
/// Logs its loss per step and per epoch ("mse" -> mse_step / mse_epoch) and per epoch only
/// ("mse_mean"); records what on_train_epoch_end sees.
class EpochMeanModel : public BoringModel {
 public:
  torch::Tensor training_step(const Batch& b, int64_t i) override {
    auto loss = BoringModel::training_step(b, i);
    LogOptions both;
    both.on_step = true;
    both.on_epoch = true;
    log("mse", loss, both);
    LogOptions epoch_only;
    epoch_only.on_step = false;
    epoch_only.on_epoch = true;
    log("mse_mean", loss, epoch_only);
    return loss;
  }
  void on_train_epoch_end() override {
    epoch_end_steps.push_back(trainer()->global_step());
    const auto& cm = trainer()->callback_metrics();
    seen_mse_epoch.push_back(cm.count("mse_epoch") ? cm.at("mse_epoch") : NAN);
  }
  std::vector<int64_t> epoch_end_steps;
  std::vector<double> seen_mse_epoch;  // callback_metrics["mse_epoch"] during on_train_epoch_end
};

/// Counts on_train_epoch_end calls; optionally sets should_stop after a given global step.
class EpochEndProbe : public Callback {
 public:
  explicit EpochEndProbe(int64_t stop_after = -1) : stop_after_(stop_after) {}
  std::string state_key() const override { return "EpochEndProbe"; }
  void on_train_batch_end(Trainer& t, LightningModule&, const torch::Tensor&, const Batch&, int64_t) override {
    if (stop_after_ >= 0 && t.global_step() >= stop_after_) t.should_stop = true;
  }
  void on_train_epoch_end(Trainer& t, LightningModule&) override { steps.push_back(t.global_step()); }
  std::vector<int64_t> steps;

 private:
  int64_t stop_after_;
};

/// The cells of `name` in rows where it is set, with their step and epoch.
struct CsvCell {
  int64_t step, epoch;
  double value;
};
std::vector<CsvCell> csv_cells(const Csv& csv, const std::string& name) {
  std::vector<CsvCell> out;
  const int c = csv.col(name), s = csv.col("step"), e = csv.col("epoch");
  if (c < 0) return out;
  for (const auto& r : csv.rows)
    if (c < static_cast<int>(r.size()) && !r[c].empty())
      out.push_back({std::stoll(r[s]), std::stoll(r[e]), std::stod(r[c])});
  return out;
}

/// True when `row` has a value in any of `cols`.
bool row_has_any(const Csv& csv, const std::vector<std::string>& row, const std::vector<std::string>& cols) {
  for (const auto& name : cols) {
    const int c = csv.col(name);
    if (c >= 0 && c < static_cast<int>(row.size()) && !row[c].empty()) return true;
  }
  return false;
}
}  // namespace

TEST_CASE("training epoch metrics average the whole epoch across mid-epoch validations", "[trainer][logging]") {
  // 8 training batches per epoch, validation after batches 3 and 6 of each epoch (not at its end).
  auto m = make_model<EpochMeanModel>(0);
  auto probe = std::make_shared<EpochEndProbe>();
  auto opts = quiet_options(temp_dir("trainer-epoch-mean"));
  opts.max_epochs = 2;
  opts.val_check_interval = BatchLimit::count(3);
  opts.log_every_n_steps = 1;
  Trainer t(opts, {probe});
  auto train = make_loader(64, 8);
  auto val = make_loader(32, 8);
  t.fit(*m, train, &val);
  REQUIRE(m->losses.size() == 16);
  const double epoch0 = mean(m->losses, 0, 8), epoch1 = mean(m->losses, 8, 16);

  // What the hooks see and what callback_metrics keep: the mean over every batch of the epoch.
  CHECK(m->epoch_end_steps == std::vector<int64_t>{8, 16});
  CHECK(probe->steps == std::vector<int64_t>{8, 16});
  REQUIRE(m->seen_mse_epoch.size() == 2);
  CHECK(m->seen_mse_epoch[0] == Approx(epoch0).epsilon(1e-6));
  CHECK(m->seen_mse_epoch[1] == Approx(epoch1).epsilon(1e-6));
  const auto& cm = t.callback_metrics();
  REQUIRE(cm.count("mse_epoch"));
  CHECK(cm.at("mse_epoch") == Approx(epoch1).epsilon(1e-6));
  CHECK(cm.at("mse_mean") == Approx(epoch1).epsilon(1e-6));
  REQUIRE(cm.count("val_loss"));

  // metrics.csv: one training-epoch row per epoch at its last step, with the whole-epoch means.
  const auto csv = read_csv(t.log_dir() + "/metrics.csv");
  for (const std::string name : {"mse_epoch", "mse_mean"}) {
    INFO(name);
    const auto cells = csv_cells(csv, name);
    REQUIRE(cells.size() == 2);
    CHECK(cells[0].step == 7);
    CHECK(cells[0].epoch == 0);
    CHECK(cells[0].value == Approx(epoch0).epsilon(1e-6));
    CHECK(cells[1].step == 15);
    CHECK(cells[1].epoch == 1);
    CHECK(cells[1].value == Approx(epoch1).epsilon(1e-6));
  }
  // Validation rows hold validation metrics only: no partial training values leak into them.
  const auto val_rows = csv_cells(csv, "val_loss");
  CHECK(val_rows.size() == 4);
  int checked = 0;
  for (const auto& r : csv.rows)
    if (row_has_any(csv, r, {"val_loss"})) {
      ++checked;
      CHECK_FALSE(row_has_any(csv, r, {"mse_epoch", "mse_mean", "mse_step", "train_loss"}));
    }
  CHECK(checked == 4);
  // Every step row is a training step: mse_step equals that step's loss.
  const auto steps = csv_cells(csv, "mse_step");
  REQUIRE(steps.size() == 16);
  for (const auto& c : steps) CHECK(c.value == Approx(m->losses[c.step]).epsilon(1e-6));
}

TEST_CASE("a fit stopped mid-epoch still ends the epoch: hooks and epoch metrics", "[trainer][logging][hooks]") {
  auto run = [](int64_t max_steps, int64_t stop_after) {
    auto m = make_model<EpochMeanModel>(0);
    auto probe = std::make_shared<EpochEndProbe>(stop_after);
    auto opts = quiet_options(temp_dir("trainer-epoch-cut"));
    opts.max_epochs = -1;
    opts.max_steps = max_steps;
    opts.val_check_interval = BatchLimit::count(2);
    Trainer t(opts, {probe});
    auto train = make_loader(64, 8);  // 8 batches per epoch
    auto val = make_loader(16, 8);
    t.fit(*m, train, &val);
    return std::make_tuple(m, probe, read_csv(t.log_dir() + "/metrics.csv"), t.global_step());
  };
  SECTION("max_steps in the middle of the first epoch") {
    auto [m, probe, csv, step] = run(5, -1);
    CHECK(step == 5);
    REQUIRE(m->losses.size() == 5);
    CHECK(m->epoch_end_steps == std::vector<int64_t>{5});
    CHECK(probe->steps == std::vector<int64_t>{5});
    REQUIRE(m->seen_mse_epoch.size() == 1);
    CHECK(m->seen_mse_epoch[0] == Approx(mean(m->losses, 0, 5)).epsilon(1e-6));
    const auto cells = csv_cells(csv, "mse_epoch");
    REQUIRE(cells.size() == 1);
    CHECK(cells[0].step == 4);
    CHECK(cells[0].epoch == 0);
    CHECK(cells[0].value == Approx(mean(m->losses, 0, 5)).epsilon(1e-6));
  }
  SECTION("max_steps in the middle of the second epoch") {
    auto [m, probe, csv, step] = run(11, -1);
    CHECK(step == 11);
    CHECK(probe->steps == std::vector<int64_t>{8, 11});
    const auto cells = csv_cells(csv, "mse_mean");
    REQUIRE(cells.size() == 2);
    CHECK(cells[0].value == Approx(mean(m->losses, 0, 8)).epsilon(1e-6));
    CHECK(cells[1].step == 10);
    CHECK(cells[1].epoch == 1);
    CHECK(cells[1].value == Approx(mean(m->losses, 8, 11)).epsilon(1e-6));
  }
  SECTION("should_stop set by a callback") {
    auto [m, probe, csv, step] = run(-1, 3);
    CHECK(step == 3);
    CHECK(m->epoch_end_steps == std::vector<int64_t>{3});
    CHECK(probe->steps == std::vector<int64_t>{3});
    const auto cells = csv_cells(csv, "mse_epoch");
    REQUIRE(cells.size() == 1);
    CHECK(cells[0].value == Approx(mean(m->losses, 0, 3)).epsilon(1e-6));
  }
}
