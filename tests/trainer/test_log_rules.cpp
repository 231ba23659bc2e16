// Lightning's logging rules: reduce_fx, epoch means weighted by batch size, logger=false, log_dict,
// the errors, and values kept on their device until a row is written or a metric is read.
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "trainer/trainer_support.h"
#include "volt/callbacks/progress_bar.h"
#include "volt/trainer/metrics.h"

using namespace volt;
using namespace volt::testing;

namespace {

/// Every row a Metrics writes, in order.
class RowLogger : public Logger {
 public:
  std::string name() const override { return "rows"; }
  int64_t version() const override { return 0; }
  std::string log_dir() const override { return ""; }
  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override {
    rows.emplace_back(step, metrics);
  }
  void log_hyperparams(const YAML::Node&, const std::map<std::string, double>&) override {}
  void flush() override {}
  std::vector<std::pair<int64_t, std::map<std::string, double>>> rows;
};

/// One CPU process whose all_reduce records the operations asked for (and returns its input: the
/// values of a peer identical to this rank).
class RecordingStrategy : public SingleDeviceStrategy {
 public:
  RecordingStrategy() : SingleDeviceStrategy(Precision("32-true", "cpu"), "cpu") {}
  torch::Tensor all_reduce(const torch::Tensor& t, ReduceOp op) override {
    const char* names[] = {"sum", "mean", "max", "min"};
    ops.push_back(std::string(names[static_cast<int>(op)]) + ":" + std::to_string(t.numel()));
    return t.clone();
  }
  std::vector<std::string> ops;  // "<operation>:<elements>"
};

LogOptions epoch_only(const char* fx = "mean") {
  LogOptions o;
  o.on_step = false;
  o.on_epoch = true;
  o.reduce_fx = fx;
  return o;
}

/// Logs batch_idx + 1 on every batch with each reduce_fx, on batches of 4, 4 and 2 samples.
class WeightedModel : public BoringModel {
 public:
  torch::Tensor training_step(const Batch& b, int64_t i) override {
    const torch::Tensor v = torch::tensor(static_cast<double>(i + 1));
    for (const char* fx : {"mean", "sum", "max", "min"}) log(std::string("w_") + fx, v, epoch_only(fx));
    LogOptions unweighted = epoch_only();
    unweighted.batch_size = 1;
    log("w_bs1", v, unweighted);
    // logger=false: callback_metrics and the progress bar only, step and epoch values alike.
    log("hidden", v, {.prog_bar = true, .on_step = true, .on_epoch = true, .logger = false});
    log("hidden_epoch_only", v, {.on_step = false, .on_epoch = true, .logger = false});
    log_dict({{"d_tensor", v * 2}}, {.on_step = false, .on_epoch = true});
    log_dict(std::map<std::string, double>{{"d_double", 3.0 * static_cast<double>(i + 1)}},
             {.on_step = false, .on_epoch = true});
    return BoringModel::training_step(b, i);
  }
  void validation_step(const Batch& b, int64_t i) override {
    BoringModel::validation_step(b, i);
    log("v_mean", static_cast<double>(i + 1));
    log("v_max", static_cast<double>(i + 1), {.reduce_fx = "max"});
  }
};

/// The cells of `name` in the rows where it is set.
std::vector<double> column(const Csv& csv, const std::string& name) {
  std::vector<double> out;
  const int c = csv.col(name);
  if (c < 0) return out;
  for (const auto& r : csv.rows)
    if (c < static_cast<int>(r.size()) && !r[c].empty()) out.push_back(std::stod(r[c]));
  return out;
}

}  // namespace

TEST_CASE("epoch values follow Lightning's reduce_fx rules, the mean weighted by batch size", "[logging]") {
  // Hand-computed with Lightning 2.x's _ResultMetric (result.py): batches of 4, 4 and 2 samples
  // log 1, 2, 3. mean = sum(v * bs) / sum(bs) = (4 + 8 + 6) / 10 = 1.8 (the unweighted mean
  // would be 2.0); sum = 6, max = 3, min = 1.
  auto m = make_model<WeightedModel>(0);
  auto opts = quiet_options(temp_dir("log-rules"));
  opts.log_every_n_steps = 1;
  Trainer t(opts);
  auto train = make_loader(10, 4);
  auto val = make_loader(10, 4);
  t.fit(*m, train, &val);
  const auto& cm = t.callback_metrics();
  for (const auto& [name, expected] : std::vector<std::pair<std::string, double>>{{"w_mean", 1.8},
                                                                                  {"w_sum", 6.0},
                                                                                  {"w_max", 3.0},
                                                                                  {"w_min", 1.0},
                                                                                  {"w_bs1", 2.0},
                                                                                  {"v_mean", 1.8},
                                                                                  {"v_max", 3.0},
                                                                                  {"d_tensor", 3.6},
                                                                                  {"d_double", 5.4},
                                                                                  {"hidden_epoch", 1.8},
                                                                                  {"hidden", 1.8},
                                                                                  {"hidden_epoch_only", 1.8}}) {
    INFO(name);
    REQUIRE(cm.count(name));
    CHECK(cm.at(name) == Approx(expected).epsilon(1e-12));
  }
  CHECK(cm.at("hidden_step") == Approx(3.0));  // the last step's value
  // The progress bar shows the epoch value of a prog_bar name once the epoch ends.
  REQUIRE(t.progress_bar_metrics().count("hidden"));
  CHECK(t.progress_bar_metrics().at("hidden") == Approx(1.8));

  const auto csv = read_csv(t.log_dir() + "/metrics.csv");
  for (const auto& [name, expected] : std::vector<std::pair<std::string, double>>{
           {"w_mean", 1.8}, {"w_sum", 6.0}, {"w_max", 3.0}, {"w_min", 1.0}, {"v_mean", 1.8}, {"d_tensor", 3.6}}) {
    INFO(name);
    CHECK(column(csv, name) == std::vector<double>{expected});
  }
  // logger=false: neither the step nor the epoch values reach metrics.csv.
  for (const char* name : {"hidden", "hidden_step", "hidden_epoch", "hidden_epoch_only"}) {
    INFO(name);
    CHECK(csv.col(name) == -1);
  }
  CHECK(csv.col("train_loss") >= 0);  // the step rows were written
}

TEST_CASE("log() errors name the problem", "[logging]") {
  RecordingStrategy s;
  Metrics m(s);
  const auto x = torch::tensor(1.0);
  auto throws_with = [&](const std::string& name, const LogOptions& o, const std::string& text,
                         const torch::Tensor& v = torch::tensor(1.0)) {
    INFO(name << ": " << text);
    CHECK_THROWS_WITH(m.log(name, v, o, RunningStage::Train), Catch::Contains(text));
  };
  SECTION("an unknown reduce_fx is named; Lightning's spellings are accepted") {
    throws_with("a", {.reduce_fx = "median"}, "reduce_fx 'median' is not supported");
    CHECK_THROWS_AS(m.log("a", x, {.reduce_fx = "median"}, RunningStage::Train), ConfigError);
    CHECK_NOTHROW(m.log("b", x, {.reduce_fx = "AVG"}, RunningStage::Train));
    CHECK_NOTHROW(m.log("c", x, {.reduce_fx = "Max"}, RunningStage::Train));
  }
  SECTION("batch_size must be positive") {
    LogOptions o = epoch_only();
    o.batch_size = 0;
    throws_with("a", o, "batch_size must be > 0, got 0");
    o.batch_size = -3;
    throws_with("a", o, "got -3");
  }
  SECTION("a value of several elements, or none") {
    throws_with("a", {}, "one-element tensor, got shape [2]", torch::ones({2}));
    throws_with("a", {}, "an undefined tensor", torch::Tensor());
  }
  SECTION("the same name with another reduce_fx in one epoch, allowed again in the next") {
    m.log("a", x, epoch_only("mean"), RunningStage::Train);
    throws_with("a", epoch_only("max"), "reduce_fx 'max' differs from 'mean'");
    m.reset_epoch(Metrics::Loop::Train);
    CHECK_NOTHROW(m.log("a", x, epoch_only("max"), RunningStage::Train));
    // Training and evaluation epochs are apart.
    CHECK_NOTHROW(m.log("a", x, epoch_only("sum"), RunningStage::Validate));
  }
  SECTION("a name logged on step and epoch collides with another name") {
    m.log("a", x, {.on_step = true, .on_epoch = true}, RunningStage::Train);
    throws_with("a_step", {.on_step = true, .on_epoch = false}, "'a_step' collides with the value of the name 'a'");
    throws_with("a_epoch", epoch_only(), "collides");
    m.log("b_epoch", x, epoch_only(), RunningStage::Train);
    throws_with("b", {.on_step = true, .on_epoch = true}, "'b_epoch' collides with the value of the name 'b_epoch'");
    // The same name again, with other on_step / on_epoch (as from another hook), is no collision.
    CHECK_NOTHROW(m.log("a", x, {.on_step = true, .on_epoch = false}, RunningStage::Train));
  }
  SECTION("on_step=false and on_epoch=false, and a dataloader suffix given by hand") {
    throws_with("a", {.on_step = false, .on_epoch = false}, "logs nothing");
    throws_with("a/dataloader_idx_0", {}, "add_dataloader_idx");
    CHECK_NOTHROW(m.log("a/dataloader_idx_0", x, {.add_dataloader_idx = false}, RunningStage::Validate));
  }
}

namespace {
/// A LogSink recording the names it receives.
class NameSink : public LogSink {
 public:
  void log_metric(const std::string& name, const torch::Tensor&, const LogOptions&) override { names.push_back(name); }
  std::vector<std::string> names;
};
}  // namespace

TEST_CASE("log_dict logs every entry, and nothing when one is not a scalar", "[logging]") {
  BoringModel model;
  NameSink sink;
  model.attach(nullptr, &sink);
  model.log_dict({{"a", torch::tensor(1.0)}, {"b", torch::tensor({2.0})}});
  model.log_dict(std::map<std::string, double>{{"c", 3.0}});
  CHECK(sink.names == std::vector<std::string>{"a", "b", "c"});
  sink.names.clear();
  CHECK_THROWS_WITH(model.log_dict({{"a", torch::tensor(1.0)}, {"z", torch::ones({2, 2})}}),
                    Catch::Contains("'z'") && Catch::Contains("shape [2, 2]"));
  CHECK(sink.names.empty());
  model.attach(nullptr, nullptr);
  CHECK_THROWS_AS(model.log_dict({{"a", torch::tensor(1.0)}}), ConfigError);
}

TEST_CASE("log() keeps values on their device: nothing is converted until a row or a read", "[logging]") {
  RecordingStrategy s;
  Metrics m(s);
  RowLogger rows;
  m.set_logger(&rows);
  SECTION("meta tensors (which cannot be read) are logged, reduced and published without a read") {
    // Any conversion to a number in log() or publish_epoch() would throw here.
    const auto meta = torch::empty({}, torch::TensorOptions().device(torch::kMeta).dtype(torch::kFloat));
    m.set_batch(Batch{torch::empty({4, 3}, torch::TensorOptions().device(torch::kMeta))});
    for (int i = 0; i < 20; ++i) {
      m.log("both", meta, {.prog_bar = true, .on_step = true, .on_epoch = true}, RunningStage::Train);
      for (const char* fx : {"mean", "sum", "max", "min"})
        m.log(std::string("e_") + fx, meta, {.prog_bar = true, .on_step = false, .on_epoch = true, .reduce_fx = fx},
              RunningStage::Train);
    }
    CHECK_NOTHROW(m.publish_epoch(Metrics::Loop::Train));
    CHECK(m.host_transfers() == 0);
    // The values really are the logged tensors: reading them is what fails.
    CHECK_THROWS(m.callback_metrics());
    CHECK_THROWS(m.flush_step_metrics(FitProgress{0, 1, 1, false}));
  }
  SECTION("CPU values: one conversion per row written or per read, none per log()") {
    FitProgress p;
    for (int step = 1; step <= 10; ++step) {
      m.set_batch(Batch{torch::zeros({2, 3})});
      for (int k = 0; k < 20; ++k)
        m.log("m" + std::to_string(k), torch::tensor(static_cast<double>(step * k)),
              {.prog_bar = true, .on_step = true, .on_epoch = true}, RunningStage::Train);
      p.global_step = step;
      if (step % 5 == 0) m.flush_step_metrics(p);
    }
    CHECK(m.host_transfers() == 2);  // two rows of 20 values each
    REQUIRE(rows.rows.size() == 2);
    CHECK(rows.rows[1].first == 9);
    CHECK(rows.rows[1].second.at("m3_step") == 30.0);
    CHECK(m.callback_metrics().at("m7_step") == 70.0);
    CHECK(m.host_transfers() == 3);
    CHECK(m.progress_bar_metrics().at("m7") == 70.0);
    CHECK(m.callback_metrics().at("m2") == 20.0);
    CHECK(m.host_transfers() == 4);  // the second callback read found nothing new
    const auto epoch = m.finish_epoch(Metrics::Loop::Train, p);
    CHECK(epoch.at("m4_epoch") == Approx(4 * 5.5));
    CHECK(m.callback_metrics().at("m4") == Approx(4 * 5.5));
    CHECK(m.host_transfers() == 5);  // the epoch row
  }
  SECTION("a logged tensor is copied: changing it afterwards changes nothing logged") {
    auto v = torch::tensor(2.0, torch::kDouble);  // already double: only a copy keeps it apart
    m.log("x", v, {.on_step = true, .on_epoch = true}, RunningStage::Train);
    v.add_(100);
    CHECK(m.callback_metrics().at("x_step") == 2.0);
    CHECK(m.finish_epoch(Metrics::Loop::Train, FitProgress{}).at("x_epoch") == 2.0);
  }
}

TEST_CASE("sync_dist reduces with reduce_fx's operation: step values when logged, epoch values at its end",
          "[logging]") {
  RecordingStrategy s;
  Metrics m(s);
  const auto x = torch::tensor(1.0);
  m.log("step_max", x, {.on_step = true, .on_epoch = false, .sync_dist = true, .reduce_fx = "max"},
        RunningStage::Train);
  REQUIRE(s.ops.size() == 1);
  CHECK(s.ops[0] == "max:1");
  s.ops.clear();
  for (int i = 0; i < 3; ++i)
    for (const char* fx : {"mean", "sum", "max", "min"}) {
      LogOptions o = epoch_only(fx);
      o.sync_dist = true;
      m.log(std::string("e_") + fx, x, o, RunningStage::Train);
      o.rank_zero_only = true;
      m.log(std::string("r0_") + fx, x, o, RunningStage::Train);
    }
  CHECK(s.ops.empty());  // epoch values are reduced over ranks once, at the end of the epoch
  const auto values = m.finish_epoch(Metrics::Loop::Train, FitProgress{});
  // By name: e_max, e_mean (value and batch-size sums together), e_min, e_sum; r0_* not at all.
  CHECK(s.ops == std::vector<std::string>{"max:1", "sum:2", "min:1", "sum:1"});
  CHECK(values.at("e_mean") == 1.0);
  CHECK(values.at("e_sum") == 3.0);
  CHECK(values.at("r0_sum") == 3.0);
}

TEST_CASE("the batch size is inferred from the batch's first tensor, positional or named", "[logging]") {
  RecordingStrategy s;
  Metrics m(s);
  auto run = [&](const Batch& b) {
    m.reset_epoch(Metrics::Loop::Train);
    m.set_batch(b);
    m.log("v", torch::tensor(1.0), epoch_only(), RunningStage::Train);
    m.set_batch(Batch{torch::zeros({1})});
    m.log("v", torch::tensor(0.0), epoch_only(), RunningStage::Train);
    return m.finish_epoch(Metrics::Loop::Train, FitProgress{}).at("v");  // n / (n + 1)
  };
  CHECK(run(Batch{torch::zeros({3, 2}), torch::zeros({5})}) == Approx(3.0 / 4));
  CHECK(run(Batch{}.set("ids", torch::zeros({7, 4}))) == Approx(7.0 / 8));
  CHECK(run(Batch{}.set("inputs", Batch{}.set("mask", torch::zeros({2, 9})))) == Approx(2.0 / 3));
  CHECK(run(Batch{torch::tensor(5.0)}) == Approx(1.0 / 2));  // a 0-dim tensor counts as 1
  m.reset_epoch(Metrics::Loop::Train);
  m.set_batch(Batch{});
  CHECK_THROWS_WITH(m.log("v", torch::tensor(1.0), epoch_only(), RunningStage::Train),
                    Catch::Contains("pass LogOptions::batch_size"));
  CHECK_NOTHROW(m.log("s", torch::tensor(1.0), epoch_only("sum"), RunningStage::Train));  // no weight needed
}

namespace {
// .item() calls on this thread while counting (aten::_local_scalar_dense is what item() runs).
thread_local int64_t item_calls = 0;
std::unique_ptr<at::ObserverContext> count_item(const at::RecordFunction& fn) {
  if (std::string(fn.name()) == "aten::_local_scalar_dense") ++item_calls;
  return nullptr;
}

/// Logs on every step, for the progress bar and the epoch.
class ChattyModel : public BoringModel {
 public:
  torch::Tensor training_step(const Batch& b, int64_t i) override {
    auto loss = BoringModel::training_step(b, i);
    log("chatty", loss * 2, {.prog_bar = true, .on_step = true, .on_epoch = true});
    return loss;
  }
};

/// The number of item() calls of one fit of 64 batches, with or without a progress bar.
int64_t items_in_fit(bool progress_bar) {
  auto m = make_model<ChattyModel>(0);
  auto opts = quiet_options(temp_dir("log-items"));
  opts.log_every_n_steps = 1000;
  opts.enable_progress_bar = progress_bar;
  std::vector<std::shared_ptr<Callback>> cbs;
  if (progress_bar) cbs.push_back(std::make_shared<ProgressBar>(/*refresh_rate=*/16));
  Trainer t(opts, cbs);
  auto train = make_loader(256, 4);
  item_calls = 0;
  auto handle = at::addThreadLocalCallback(at::RecordFunctionCallback(&count_item));
  t.fit(*m, train);
  at::removeCallback(handle);
  return item_calls;
}
}  // namespace

TEST_CASE("the progress bar reads values only when it draws, not on every batch", "[logging][progress_bar]") {
  const int64_t without = items_in_fit(false), with = items_in_fit(true);
  INFO("item() calls: " << without << " without a progress bar, " << with << " with one");
  CHECK(without > 0);  // the counter sees the fit's own reads
  // 64 batches; the bar draws at most 11 times (every 16 batches on a terminal, every 10% of
  // the epoch otherwise) and reads the loss once per draw.
  CHECK(with - without <= 11);
  CHECK(with - without >= 1);
}
