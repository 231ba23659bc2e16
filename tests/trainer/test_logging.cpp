// Logging from the Trainer: log_every_n_steps, on_step/on_epoch metrics, epoch means in metrics.csv.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "trainer/trainer_support.h"

using namespace volt;
using namespace volt::testing;

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
  CHECK(cm.at("m_step") == Approx(30.0));                       // the last step
  CHECK(cm.at("m_epoch") == Approx((0 + 10 + 20 + 30) / 4.0));  // the epoch mean
  CHECK(cm.at("m") == Approx(15.0));                            // after the epoch: the epoch value
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
