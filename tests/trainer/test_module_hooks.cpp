// The LightningModule's overridable hooks: the whole order of a fit, a test and a predict as
// Lightning calls them, and what each override can change (the optimizer step, zeroing,
// clipping, scheduler steps, batch transfer, on_train_batch_start's -1, configure_callbacks).
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "trainer/trainer_support.h"
#include "volt/callbacks/early_stopping.h"

using namespace volt;
using namespace volt::testing;

namespace {
/// Records every module hook, the overridable optimization and data hooks included.
class FullRecorder : public BoringModel {
 public:
  std::vector<std::string> calls;
  void rec(const std::string& s) { calls.push_back(s); }

  void prepare_data() override { rec("prepare_data"); }
  std::vector<std::shared_ptr<Callback>> configure_callbacks() override {
    rec("configure_callbacks");
    return {};
  }
  void setup(const std::string& stage) override { rec("setup:" + stage); }
  void teardown(const std::string& stage) override { rec("teardown:" + stage); }
  void configure_model() override { rec("configure_model"); }
  Optimizers configure_optimizers() override {
    rec("configure_optimizers");
    return BoringModel::configure_optimizers();
  }
  Batch on_before_batch_transfer(Batch b, int64_t) override {
    rec("on_before_batch_transfer");
    return b;
  }
  Batch transfer_batch_to_device(Batch b, const torch::Device& d, int64_t i) override {
    rec("transfer_batch_to_device");
    return BoringModel::transfer_batch_to_device(std::move(b), d, i);
  }
  Batch on_after_batch_transfer(Batch b, int64_t) override {
    rec("on_after_batch_transfer");
    return b;
  }
  torch::Tensor training_step(const Batch& b, int64_t i) override {
    rec("training_step");
    return BoringModel::training_step(b, i);
  }
  void validation_step(const Batch& b, int64_t i) override {
    rec("validation_step");
    BoringModel::validation_step(b, i);
  }
  void test_step(const Batch& b, int64_t i) override {
    rec("test_step");
    BoringModel::test_step(b, i);
  }
  Batch predict_step(const Batch& b, int64_t) override {
    rec("predict_step");
    return {forward(b[0])};
  }
  void optimizer_step(int64_t e, int64_t i, LightningOptimizer& o, const std::function<void()>& closure) override {
    rec("optimizer_step");
    LightningModule::optimizer_step(e, i, o, closure);
  }
  void optimizer_zero_grad(int64_t e, int64_t i, LightningOptimizer& o) override {
    rec("optimizer_zero_grad");
    LightningModule::optimizer_zero_grad(e, i, o);
  }
  void configure_gradient_clipping(LightningOptimizer& o, std::optional<double> v, GradientClipAlgorithm a) override {
    rec("configure_gradient_clipping");
    LightningModule::configure_gradient_clipping(o, v, a);
  }
  void on_before_zero_grad(torch::optim::Optimizer&) override { rec("on_before_zero_grad"); }
  void on_fit_start() override { rec("on_fit_start"); }
  void on_fit_end() override { rec("on_fit_end"); }
  void on_train_start() override { rec("on_train_start"); }
  void on_train_end() override { rec("on_train_end"); }
  void on_train_epoch_start() override { rec("on_train_epoch_start"); }
  void on_train_epoch_end() override { rec("on_train_epoch_end"); }
  int on_train_batch_start(const Batch&, int64_t) override {
    rec("on_train_batch_start");
    return 0;
  }
  void on_train_batch_end(const torch::Tensor&, const Batch&, int64_t) override { rec("on_train_batch_end"); }
  void on_validation_model_eval() override {
    rec("on_validation_model_eval");
    LightningModule::on_validation_model_eval();
  }
  void on_validation_model_train() override {
    rec("on_validation_model_train");
    LightningModule::on_validation_model_train();
  }
  void on_validation_start() override { rec("on_validation_start"); }
  void on_validation_end() override { rec("on_validation_end"); }
  void on_validation_epoch_start() override { rec("on_validation_epoch_start"); }
  void on_validation_epoch_end() override { rec("on_validation_epoch_end"); }
  void on_validation_batch_start(const Batch&, int64_t, int64_t) override { rec("on_validation_batch_start"); }
  void on_validation_batch_end(const Batch&, int64_t, int64_t) override { rec("on_validation_batch_end"); }
  void on_test_start() override { rec("on_test_start"); }
  void on_test_end() override { rec("on_test_end"); }
  void on_test_epoch_start() override { rec("on_test_epoch_start"); }
  void on_test_epoch_end() override { rec("on_test_epoch_end"); }
  void on_test_batch_start(const Batch&, int64_t, int64_t) override { rec("on_test_batch_start"); }
  void on_test_batch_end(const Batch&, int64_t, int64_t) override { rec("on_test_batch_end"); }
  void on_predict_start() override { rec("on_predict_start"); }
  void on_predict_epoch_start() override { rec("on_predict_epoch_start"); }
  void on_predict_batch_start(const Batch&, int64_t, int64_t) override { rec("on_predict_batch_start"); }
  void on_predict_batch_end(const Batch&, const Batch&, int64_t, int64_t) override { rec("on_predict_batch_end"); }
  void on_predict_epoch_end() override { rec("on_predict_epoch_end"); }
  void on_predict_end() override { rec("on_predict_end"); }
  void on_before_backward(const torch::Tensor&) override { rec("on_before_backward"); }
  void on_after_backward() override { rec("on_after_backward"); }
  void on_before_optimizer_step(torch::optim::Optimizer&) override { rec("on_before_optimizer_step"); }
};

const std::vector<std::string> kTransfer = {"on_before_batch_transfer", "transfer_batch_to_device",
                                            "on_after_batch_transfer"};

void append(std::vector<std::string>& out, const std::vector<std::string>& more) {
  out.insert(out.end(), more.begin(), more.end());
}

std::vector<std::string> validation_epoch(int batches) {
  std::vector<std::string> v = {"on_validation_model_eval", "on_validation_start", "on_validation_epoch_start"};
  for (int i = 0; i < batches; ++i) {
    append(v, kTransfer);
    append(v, {"on_validation_batch_start", "validation_step", "on_validation_batch_end"});
  }
  append(v, {"on_validation_epoch_end", "on_validation_end", "on_validation_model_train"});
  return v;
}
}  // namespace

TEST_CASE("a fit calls every module hook in Lightning's order", "[trainer][module_hooks]") {
  auto m = make_model<FullRecorder>(0);
  auto opts = quiet_options(temp_dir("module-hooks"));
  opts.limit_train_batches = BatchLimit::count(2);
  opts.limit_val_batches = BatchLimit::count(1);
  opts.num_sanity_val_steps = 1;
  Trainer t(opts);
  auto dl = make_loader();
  auto val = make_loader(16, 8);
  t.fit(*m, dl, &val);
  std::vector<std::string> expected = {"prepare_data",    "configure_callbacks",  "setup:fit",
                                       "configure_model", "configure_optimizers", "on_fit_start"};
  append(expected, validation_epoch(1));  // the sanity check
  append(expected, {"on_train_start", "on_train_epoch_start"});
  for (int i = 0; i < 2; ++i) {
    append(expected, kTransfer);
    append(expected, {"on_train_batch_start", "training_step", "on_before_backward", "on_after_backward",
                      "optimizer_step", "on_before_optimizer_step", "configure_gradient_clipping",
                      "on_before_zero_grad", "optimizer_zero_grad", "on_train_batch_end"});
  }
  append(expected, validation_epoch(1));
  append(expected, {"on_train_epoch_end", "on_train_end", "on_fit_end", "teardown:fit"});
  CHECK(m->calls == expected);
}

TEST_CASE("test and predict call their module hooks in Lightning's order", "[trainer][module_hooks]") {
  auto m = make_model<FullRecorder>(0);
  auto opts = quiet_options(temp_dir("module-hooks-test"));
  opts.limit_test_batches = BatchLimit::count(2);
  Trainer t(opts);
  auto dl = make_loader(16, 8);
  t.test(*m, dl);
  std::vector<std::string> expected = {"prepare_data",    "configure_callbacks", "setup:test",
                                       "configure_model", "on_test_start",       "on_test_epoch_start"};
  for (int i = 0; i < 2; ++i) {
    append(expected, kTransfer);
    append(expected, {"on_test_batch_start", "test_step", "on_test_batch_end"});
  }
  append(expected, {"on_test_epoch_end", "on_test_end", "teardown:test"});
  CHECK(m->calls == expected);

  m->calls.clear();
  t.predict(*m, dl);
  // prepare_data runs once per Trainer and module, as Lightning's is guarded per node.
  expected = {"configure_callbacks", "setup:predict", "configure_model", "on_predict_start", "on_predict_epoch_start"};
  for (int i = 0; i < 2; ++i) {
    append(expected, kTransfer);
    append(expected, {"on_predict_batch_start", "predict_step", "on_predict_batch_end"});
  }
  append(expected, {"on_predict_epoch_end", "on_predict_end", "teardown:predict"});
  CHECK(m->calls == expected);
}

namespace {
/// Linear warm-up in optimizer_step, Lightning's documented example; optionally skips odd steps.
class WarmupModel : public BoringModel {
 public:
  bool skip_odd = false;
  std::vector<double> lrs_seen;  // in on_before_optimizer_step, i.e. inside the step
  int64_t steps_called = 0;
  void optimizer_step(int64_t epoch, int64_t batch_idx, LightningOptimizer& o,
                      const std::function<void()>& closure) override {
    const int64_t step = trainer()->global_step();
    for (auto& g : o.param_groups()) g.options().set_lr(0.1 * std::min(1.0, (step + 1) / 4.0));
    ++steps_called;
    if (skip_odd && step % 2 == 1) return;
    o.step(closure);
  }
  void on_before_optimizer_step(torch::optim::Optimizer& o) override {
    lrs_seen.push_back(o.param_groups()[0].options().get_lr());
  }
};
}  // namespace

TEST_CASE("optimizer_step overrides change the learning rate or skip the step", "[trainer][module_hooks]") {
  SECTION("warm-up") {
    auto m = make_model<WarmupModel>(0);
    auto opts = quiet_options(temp_dir("module-hooks-warmup"));
    opts.limit_train_batches = BatchLimit::count(6);
    Trainer t(opts);
    auto dl = make_loader();
    t.fit(*m, dl);
    const std::vector<double> expected = {0.025, 0.05, 0.075, 0.1, 0.1, 0.1};
    REQUIRE(m->lrs_seen.size() == expected.size());
    for (size_t i = 0; i < expected.size(); ++i) CHECK(m->lrs_seen[i] == Approx(expected[i]));
    CHECK(t.global_step() == 6);
  }
  SECTION("a skipped step leaves the weights and still counts the window") {
    auto skipping = make_model<WarmupModel>(0);
    skipping->skip_odd = true;
    auto opts = quiet_options(temp_dir("module-hooks-skip"));
    opts.limit_train_batches = BatchLimit::count(2);
    auto dl = make_loader();
    std::vector<torch::Tensor> after_first;
    struct Snap : Callback {
      std::vector<torch::Tensor>* out;
      std::string state_key() const override { return "Snap"; }
      void on_train_batch_end(Trainer&, LightningModule& m, const torch::Tensor&, const Batch&, int64_t i) override {
        if (i == 0) *out = snapshot(m);
      }
    };
    auto snap = std::make_shared<Snap>();
    snap->out = &after_first;
    Trainer t2(opts, {snap});
    t2.fit(*skipping, dl);
    CHECK(skipping->steps_called == 2);
    CHECK(skipping->lrs_seen.size() == 1);  // the skipped step ran no closure
    CHECK(t2.global_step() == 2);
    CHECK(all_equal(after_first, snapshot(*skipping)));  // the second window's step was skipped
  }
}

TEST_CASE("LightningOptimizer::step outside optimizer_step under automatic optimization is refused",
          "[trainer][module_hooks]") {
  struct Stepping : BoringModel {
    torch::Tensor training_step(const Batch& b, int64_t i) override {
      optimizers()[0]->step();
      return BoringModel::training_step(b, i);
    }
  };
  auto m = make_model<Stepping>(0);
  Trainer t(quiet_options(temp_dir("module-hooks-refuse")));
  auto dl = make_loader();
  CHECK_THROWS_WITH(t.fit(*m, dl), Catch::Contains("override optimizer_step"));
}

TEST_CASE("configure_gradient_clipping receives the Trainer's values and may clip otherwise",
          "[trainer][module_hooks]") {
  struct Clipping : BoringModel {
    std::vector<std::pair<std::optional<double>, GradientClipAlgorithm>> seen;
    double norm_after = -1;
    void configure_gradient_clipping(LightningOptimizer& o, std::optional<double> v, GradientClipAlgorithm a) override {
      seen.emplace_back(v, a);
      clip_gradients(o, 1e-3, GradientClipAlgorithm::Norm);  // tighter than the Trainer's
      double sq = 0;
      for (auto& p : parameters())
        if (p.grad().defined()) sq += p.grad().pow(2).sum().item<double>();
      norm_after = std::sqrt(sq);
    }
  };
  auto m = make_model<Clipping>(0);
  auto opts = quiet_options(temp_dir("module-hooks-clip"));
  opts.limit_train_batches = BatchLimit::count(1);
  opts.gradient_clip_val = 5.0;
  opts.gradient_clip_algorithm = GradientClipAlgorithm::Value;
  Trainer t(opts);
  auto dl = make_loader();
  t.fit(*m, dl);
  REQUIRE(m->seen.size() == 1);
  CHECK(m->seen[0].first == 5.0);
  CHECK(m->seen[0].second == GradientClipAlgorithm::Value);
  CHECK(m->norm_after == Approx(1e-3).epsilon(1e-3));
}

TEST_CASE("optimizer_zero_grad overrides decide when gradients are cleared", "[trainer][module_hooks]") {
  // Not clearing is accumulation over two batches by hand: the same weights as
  // accumulate_grad_batches = 2 with a loss scaled by 1/2... with SGD, twice the summed gradient,
  // so compare against the Trainer's accumulation with the learning rate halved.
  struct KeepEven : BoringModel {
    explicit KeepEven(BoringOptions o) : BoringModel(o) {}
    void optimizer_step(int64_t e, int64_t i, LightningOptimizer& o, const std::function<void()>& c) override {
      if (i % 2 == 1) o.step(c);  // step every second batch on the gradients of both
    }
    void optimizer_zero_grad(int64_t, int64_t i, LightningOptimizer& o) override {
      if (i % 2 == 1) o.zero_grad();
    }
  };
  BoringOptions bo;
  bo.lr = 0.05;
  auto manual = make_model<KeepEven>(0, bo);
  auto opts = quiet_options(temp_dir("module-hooks-zero"));
  opts.limit_train_batches = BatchLimit::count(4);
  Trainer t(opts);
  auto dl = make_loader();
  t.fit(*manual, dl);

  auto reference = make_model<BoringModel>(0);  // lr 0.1, mean of two gradients = (0.05) x sum
  auto ropts = opts;
  ropts.default_root_dir = temp_dir("module-hooks-zero-ref");
  ropts.accumulate_grad_batches = 2;
  Trainer rt(ropts);
  rt.fit(*reference, dl);
  CHECK(max_abs_diff(snapshot(*manual), snapshot(*reference)) < 1e-6);
  CHECK(t.global_step() == 4);  // every window counts, stepped or not
  CHECK(rt.global_step() == 2);
}

TEST_CASE("lr_scheduler_step overrides step the schedulers", "[trainer][module_hooks]") {
  struct Counting : ScheduledModel {
    Counting() : ScheduledModel("step", 1) {}
    int64_t calls = 0;
    void lr_scheduler_step(LRScheduler& s, std::optional<double> metric) override {
      ++calls;
      CHECK_FALSE(metric.has_value());
      if (calls % 2 == 0) s.step();  // every second one only
    }
  };
  auto m = make_model<Counting>(0);
  auto opts = quiet_options(temp_dir("module-hooks-sched"));
  opts.limit_train_batches = BatchLimit::count(4);
  Trainer t(opts);
  auto dl = make_loader();
  t.fit(*m, dl);
  CHECK(m->calls == 4);
  // StepLR(step_size 1, gamma 0.5) stepped twice: 0.1 * 0.25.
  CHECK(t.optimizer()->param_groups()[0].options().get_lr() == Approx(0.025));
}

TEST_CASE("on_train_batch_start returning -1 ends the epoch there", "[trainer][module_hooks]") {
  struct Stopper : BoringModel {
    int64_t epoch_ends = 0;
    int on_train_batch_start(const Batch&, int64_t i) override { return i == 3 ? -1 : 0; }
    void on_train_epoch_end() override { ++epoch_ends; }
  };
  auto m = make_model<Stopper>(0);
  auto opts = quiet_options(temp_dir("module-hooks-minus1"));
  opts.max_epochs = 2;
  Trainer t(opts);
  auto dl = make_loader();  // 8 batches
  t.fit(*m, dl);
  CHECK(m->losses.size() == 6);  // batches 0-2 of each epoch
  CHECK(t.global_step() == 6);
  CHECK(m->epoch_ends == 2);
  CHECK(t.current_epoch() == 2);
}

TEST_CASE("the batch-transfer hooks change what the steps see", "[trainer][module_hooks]") {
  struct Doubling : BoringModel {
    std::vector<double> seen;
    Batch on_before_batch_transfer(Batch b, int64_t) override {
      return b.map([](const torch::Tensor& x) { return x * 2; });
    }
    Batch on_after_batch_transfer(Batch b, int64_t) override {
      return b.map([](const torch::Tensor& x) { return x + 1; });
    }
    torch::Tensor training_step(const Batch& b, int64_t i) override {
      seen.push_back(b[0].sum().item<double>());
      return BoringModel::training_step(b, i);
    }
  };
  auto m = make_model<Doubling>(0);
  auto opts = quiet_options(temp_dir("module-hooks-transfer"));
  opts.limit_train_batches = BatchLimit::count(1);
  Trainer t(opts);
  auto dl = make_loader();
  t.fit(*m, dl);
  Batch first = *dl.iterate(0).next();
  REQUIRE(m->seen.size() == 1);
  CHECK(m->seen[0] == Approx((first[0] * 2 + 1).sum().item<double>()));
}

TEST_CASE("configure_callbacks adds the module's callbacks, replacing the Trainer's of a type",
          "[trainer][module_hooks]") {
  struct WithCallbacks : BoringModel {
    std::shared_ptr<EarlyStopping> mine;
    std::vector<std::shared_ptr<Callback>> configure_callbacks() override {
      EarlyStoppingOptions o;
      o.monitor = "train_loss";
      o.patience = 100;
      o.strict = false;
      mine = std::make_shared<EarlyStopping>(o);
      return {mine, every_step_checkpoint()};
    }
  };
  auto m = make_model<WithCallbacks>(0);
  auto opts = quiet_options(temp_dir("module-hooks-callbacks"));
  opts.enable_checkpointing = true;  // the module's ModelCheckpoint needs it on
  opts.limit_train_batches = BatchLimit::count(1);
  EarlyStoppingOptions theirs;
  theirs.monitor = "val_loss";
  auto trainer_es = std::make_shared<EarlyStopping>(theirs);
  auto recorder = std::make_shared<LrRecorder>();
  Trainer t(opts, {trainer_es, recorder});
  auto dl = make_loader();
  t.fit(*m, dl);
  const auto& cbs = t.callbacks();
  REQUIRE(cbs.size() == 3);
  CHECK(cbs[0] == recorder);                                       // the Trainer's other callback stays
  CHECK(cbs[1] == m->mine);                                        // the module's replaces the Trainer's
  CHECK(dynamic_cast<ModelCheckpoint*>(cbs[2].get()) != nullptr);  // checkpoints last
  CHECK(recorder->lrs.size() == 1);
}

TEST_CASE("freeze, unfreeze, all_gather and print on one process", "[trainer][module_hooks]") {
  auto m = make_model<BoringModel>(0);
  m->freeze();
  CHECK_FALSE(m->is_training());
  for (auto& p : m->parameters()) CHECK_FALSE(p.requires_grad());
  m->unfreeze();
  CHECK(m->is_training());
  for (auto& p : m->parameters()) CHECK(p.requires_grad());
  auto x = torch::arange(6).view({2, 3});
  auto g = m->all_gather(x);
  CHECK(g.sizes() == torch::IntArrayRef({1, 2, 3}));
  CHECK(torch::equal(g[0], x));
  m->print("printed ", 42);  // no trainer: prints (rank 0 by definition)
}

namespace {
/// Records the callback events that have no module counterpart or were added with the module's.
class EventRecorder : public Callback {
 public:
  std::vector<std::string> calls;
  std::string state_key() const override { return "EventRecorder"; }
  void on_sanity_check_start(Trainer& t, LightningModule&) override {
    calls.push_back(std::string("on_sanity_check_start:") + (t.sanity_checking() ? "sanity" : "-"));
  }
  void on_sanity_check_end(Trainer& t, LightningModule&) override {
    calls.push_back(std::string("on_sanity_check_end:") + (t.sanity_checking() ? "sanity" : "-"));
  }
  void on_validation_batch_start(Trainer&, LightningModule&, const Batch&, int64_t i) override {
    calls.push_back("on_validation_batch_start:" + std::to_string(i));
  }
  void on_before_zero_grad(Trainer&, LightningModule&, torch::optim::Optimizer&) override {
    calls.push_back("on_before_zero_grad");
  }
  void on_test_start(Trainer&, LightningModule&) override { calls.push_back("on_test_start"); }
  void on_test_epoch_start(Trainer&, LightningModule&) override { calls.push_back("on_test_epoch_start"); }
  void on_test_batch_start(Trainer&, LightningModule&, const Batch&, int64_t) override {
    calls.push_back("on_test_batch_start");
  }
  void on_test_batch_end(Trainer&, LightningModule&, const Batch&, int64_t) override {
    calls.push_back("on_test_batch_end");
  }
  void on_test_end(Trainer&, LightningModule&) override { calls.push_back("on_test_end"); }
  void on_predict_epoch_start(Trainer&, LightningModule&) override { calls.push_back("on_predict_epoch_start"); }
  void on_predict_batch_start(Trainer&, LightningModule&, const Batch&, int64_t) override {
    calls.push_back("on_predict_batch_start");
  }
};
}  // namespace

TEST_CASE("callbacks hear the sanity check, zero_grad, test and predict batch events", "[trainer][module_hooks]") {
  struct Predicting : BoringModel {
    Batch predict_step(const Batch& b, int64_t) override { return {forward(b[0])}; }
  };
  auto m = make_model<Predicting>(0);
  auto opts = quiet_options(temp_dir("module-hooks-events"));
  opts.limit_train_batches = BatchLimit::count(1);
  opts.limit_val_batches = BatchLimit::count(1);
  opts.limit_test_batches = BatchLimit::count(1);
  opts.limit_predict_batches = BatchLimit::count(1);
  opts.num_sanity_val_steps = 1;
  auto rec = std::make_shared<EventRecorder>();
  Trainer t(opts, {rec});
  auto dl = make_loader();
  auto val = make_loader(16, 8);
  t.fit(*m, dl, &val);
  CHECK(rec->calls == std::vector<std::string>{"on_sanity_check_start:sanity", "on_validation_batch_start:0",
                                               "on_sanity_check_end:sanity", "on_before_zero_grad",
                                               "on_validation_batch_start:0"});
  rec->calls.clear();
  t.test(*m, val);
  t.predict(*m, val);
  CHECK(rec->calls == std::vector<std::string>{"on_test_start", "on_test_epoch_start", "on_test_batch_start",
                                               "on_test_batch_end", "on_test_end", "on_predict_epoch_start",
                                               "on_predict_batch_start"});
}
