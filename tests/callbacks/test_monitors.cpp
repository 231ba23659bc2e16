// ThroughputMonitor, DeviceStatsMonitor, Timer / max_time, fast_dev_run and overfit_batches.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <set>
#include <thread>

#include "boring_model.h"
#include "trainer/trainer_support.h"
#include "volt/callbacks/device_stats_monitor.h"
#include "volt/callbacks/throughput_monitor.h"
#include "volt/callbacks/timer.h"
#include "volt/core/errors.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using Catch::Matchers::WithinRel;

namespace {

/// Counts its steps and keeps the training batches it saw; sleeps `sleep_ms` in each training step.
class CountingModel : public BoringModel {
 public:
  explicit CountingModel(int sleep_ms = 0) : sleep_ms_(sleep_ms) {}
  torch::Tensor training_step(const Batch& b, int64_t i) override {
    if (sleep_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
    train_batches.push_back(b[0].clone());
    return BoringModel::training_step(b, i);
  }
  void validation_step(const Batch& b, int64_t i) override {
    ++val_steps;
    BoringModel::validation_step(b, i);
  }
  void test_step(const Batch& b, int64_t i) override {
    ++test_steps;
    BoringModel::test_step(b, i);
  }
  std::vector<torch::Tensor> train_batches;
  int64_t val_steps = 0, test_steps = 0;

 private:
  int sleep_ms_;
};

/// A module that knows its FLOPs per batch.
class FlopsModel : public BoringModel, public FlopsPerBatch {
 public:
  double flops_per_batch() const override { return 2e6; }
};

int64_t count_files(const std::string& dir) {
  if (!fs::exists(dir)) return 0;
  int64_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) ++n;
  return n;
}

}  // namespace

TEST_CASE("Throughput: rates over the window, by hand", "[monitors]") {
  volt::detail::Throughput t(/*window=*/3, /*available_flops=*/100.0, /*world_size=*/2, "/");
  t.update(1.0, 1, 4, 10, 50);
  t.update(2.0, 2, 8, 20, 50);
  auto m = t.compute();
  CHECK(m["time"] == 2.0);
  CHECK(m["samples"] == 8);
  CHECK(m.count("device/samples_per_sec") == 0);  // the window is not full yet
  t.update(3.0, 3, 12, 30, 50);
  m = t.compute();
  CHECK(m["device/batches_per_sec"] == 1.0);  // 2 batches in 2 s
  CHECK(m["device/samples_per_sec"] == 4.0);  // 8 samples in 2 s
  CHECK(m["batches_per_sec"] == 2.0);         // x world size
  CHECK(m["samples_per_sec"] == 8.0);
  CHECK(m["device/items_per_sec"] == 40.0);  // 4 samples/s x mean length 10
  CHECK(m["items_per_sec"] == 80.0);
  CHECK(m["flops_per_sec"] == 100.0);  // (3 - 1) batches x 50 x 2 ranks in 2 s
  CHECK(m["device/flops_per_sec"] == 50.0);
  CHECK(m["device/mfu"] == 0.5);
  CHECK(m["lengths"] == 30);
  t.update(5.0, 4, 16, 40, 50);  // the window slides: 2..5 s
  m = t.compute();
  CHECK_THAT(m["device/samples_per_sec"], WithinRel(8.0 / 3.0, 1e-12));
  CHECK_THROWS_AS(t.update(5.0, 5, 20, 50, 50), ConfigError);  // time must increase
}

TEST_CASE("ThroughputMonitor logs Lightning's names during fit", "[monitors]") {
  const std::string root = temp_dir("throughput_fit");
  torch::manual_seed(1);
  auto model = std::make_shared<FlopsModel>();
  DataLoader train = make_loader(64, 8);
  TrainerOptions o = quiet_options(root);
  o.max_steps = 6;
  o.log_every_n_steps = 1;
  ThroughputMonitorOptions to;
  to.window_size = 3;
  to.available_flops = 1e12;
  auto monitor = std::make_shared<ThroughputMonitor>(to);
  Trainer trainer(o, {monitor});
  trainer.fit(*model, train);
  auto m = monitor->last_metrics();
  CHECK(m["train/batches"] == 6);
  CHECK(m["train/samples"] == 48);
  CHECK(m["train/lengths"] == 6 * 32);  // [8, 32] batches: a sample's length is 32
  const double sps = m["train/device/samples_per_sec"];
  CHECK(sps > 0);
  CHECK_THAT(m["train/device/batches_per_sec"], WithinRel(sps / 8, 1e-9));
  CHECK_THAT(m["train/device/items_per_sec"], WithinRel(sps * 32, 1e-9));
  CHECK_THAT(m["train/device/flops_per_sec"], WithinRel(sps / 8 * 2e6, 1e-9));
  CHECK_THAT(m["train/device/mfu"], WithinRel(m["train/device/flops_per_sec"] / 1e12, 1e-9));
  CHECK(m.count("train/samples_per_sec") == 0);  // one device: no global rates
  // The window (the last 2 steps, 16 samples) took at most the whole training time.
  CHECK(m["train/time"] > 0);
  CHECK(sps >= 16 / m["train/time"]);
  const Csv csv = read_csv(trainer.log_dir() + "/metrics.csv");
  CHECK(csv.col("train/device/samples_per_sec") >= 0);
  CHECK(csv.col("train/device/mfu") >= 0);
}

TEST_CASE("ThroughputMonitor with a batch_size_fn and no FLOPs logs no flops or mfu", "[monitors]") {
  const std::string root = temp_dir("throughput_fn");
  auto model = make_model(1);
  DataLoader train = make_loader(64, 8);
  TrainerOptions o = quiet_options(root);
  o.max_steps = 4;
  ThroughputMonitorOptions to;
  to.window_size = 2;
  auto monitor = std::make_shared<ThroughputMonitor>(
      to, [](const Batch& b) { return b[0].size(0) * 10; }, [](const Batch&) { return int64_t{5}; });
  Trainer trainer(o, {monitor});
  trainer.fit(*model, train);
  auto m = monitor->last_metrics();
  CHECK(m["train/samples"] == 4 * 80);
  CHECK(m["train/lengths"] == 4 * 5);
  CHECK(m.count("train/device/flops_per_sec") == 0);
  CHECK(m.count("train/device/mfu") == 0);
  CHECK_THROWS_AS(ThroughputMonitor(ThroughputMonitorOptions{1}), ConfigError);
}

TEST_CASE("DeviceStatsMonitor: host memory now and at its peak", "[monitors]") {
  const HostMemory h = read_host_memory();
  REQUIRE(h.rss > 0);
  CHECK(h.rss_peak >= h.rss);
  CHECK(h.vm_percent > 0);
  CHECK(h.vm_percent <= 100);

  const std::string root = temp_dir("device_stats");
  auto model = make_model(1);
  DataLoader train = make_loader(32, 8);
  TrainerOptions o = quiet_options(root);
  o.max_steps = 2;
  o.log_every_n_steps = 1;
  auto monitor = std::make_shared<DeviceStatsMonitor>();
  Trainer trainer(o, {monitor});
  trainer.fit(*model, train);
  auto m = monitor->last_metrics();
  CHECK(m["DeviceStatsMonitor.on_train_batch_end/cpu_rss_bytes"] > 0);
  CHECK(m["DeviceStatsMonitor.on_train_batch_end/cpu_rss_peak_bytes"] >=
        m["DeviceStatsMonitor.on_train_batch_end/cpu_rss_bytes"]);
  CHECK(m.count("DeviceStatsMonitor.on_train_batch_end/allocated_bytes.all.current") == 0);  // on the CPU
  const Csv csv = read_csv(trainer.log_dir() + "/metrics.csv");
  const int stats = csv.col("DeviceStatsMonitor.on_train_batch_end/cpu_rss_bytes");
  REQUIRE(stats >= 0);
  // Its rows share the steps of the training metrics (0 and 1 of this 2-step fit), as Lightning's.
  std::set<std::string> stat_steps;
  for (const auto& r : csv.rows)
    if (static_cast<int>(r.size()) > stats && !r[static_cast<size_t>(stats)].empty())
      stat_steps.insert(r[static_cast<size_t>(csv.col("step"))]);
  CHECK(stat_steps == std::set<std::string>{"0", "1"});
}

TEST_CASE("Duration: DD:HH:MM:SS or a map, as Lightning's max_time", "[monitors]") {
  CHECK(Duration("00:12:00:00").seconds == 12 * 3600);
  CHECK(Duration("01:02:03:04").seconds == ((24 + 2) * 60 + 3) * 60 + 4);
  CHECK(Duration(90061).str() == "01:01:01:01");
  CHECK_THROWS_WITH(Duration("12:00"), Contains("DD:HH:MM:SS"));
  auto o = options_from_yaml<TrainerOptions>(YAML::Load("max_time: {days: 1, hours: 5, minutes: 0.5}"), "trainer");
  REQUIRE(o.max_time);
  CHECK(o.max_time->seconds == 86400 + 5 * 3600 + 30);
  o = options_from_yaml<TrainerOptions>(YAML::Load("max_time: '00:00:01:00'"), "trainer");
  CHECK(o.max_time->seconds == 60);
  CHECK(options_to_yaml(o)["max_time"].as<std::string>() == "00:00:01:00");
  CHECK_THROWS_WITH(options_from_yaml<TrainerOptions>(YAML::Load("max_time: {hour: 1}"), "trainer"),
                    Contains("trainer.max_time.hour"));
}

TEST_CASE("Timer: time per stage on a fake clock, saved and restored", "[monitors]") {
  double now = 100;
  TimerOptions to;
  to.duration = Duration(10);
  Timer timer(to, [&] { return now; });
  Trainer trainer(quiet_options(temp_dir("timer_unit")));
  auto model = make_model(1);
  CHECK(timer.time_elapsed() == 0);
  timer.on_train_start(trainer, *model);
  now = 104;
  CHECK(timer.time_elapsed("train") == 4);
  CHECK(*timer.time_remaining() == 6);
  timer.on_validation_start(trainer, *model);
  now = 105.5;
  timer.on_validation_end(trainer, *model);
  CHECK(timer.time_elapsed("validate") == 1.5);
  now = 111;
  timer.on_train_batch_end(trainer, *model, torch::Tensor(), Batch(), 0);
  CHECK(trainer.should_stop);  // 11 s >= 10 s
  timer.on_train_end(trainer, *model);
  now = 200;
  CHECK(timer.time_elapsed() == 11);  // ended: no longer counting

  Timer resumed(to, [&] { return now; });
  resumed.load_state_dict(timer.state_dict());
  CHECK(resumed.time_elapsed() == 11);
  resumed.on_train_start(trainer, *model);
  now = 202;
  CHECK(resumed.time_elapsed() == 13);
  CHECK(timer.state_dict()["time_elapsed"]["validate"].as<double>() == 1.5);
}

TEST_CASE("max_time stops fit at the step after the time is spent, and a resume keeps counting", "[monitors]") {
  const std::string root = temp_dir("max_time");
  auto model = make_model<CountingModel>(1, /*sleep_ms=*/100);
  DataLoader train = make_loader(64, 8);
  TrainerOptions o = quiet_options(root);
  o.max_epochs = -1;
  o.max_steps = 1000;
  o.max_time = Duration("00:00:00:01");
  o.enable_checkpointing = true;
  Trainer trainer(o);
  const auto t0 = std::chrono::steady_clock::now();
  trainer.fit(*model, train);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(wall >= 1.0);
  CHECK(wall < 2.5);
  CHECK(trainer.global_step() >= 9);  // 100 ms a step
  CHECK(trainer.global_step() <= 12);
  Timer* timer = nullptr;
  for (auto& c : trainer.callbacks())
    if (auto* t = dynamic_cast<Timer*>(c.get())) timer = t;
  REQUIRE(timer != nullptr);
  CHECK(timer->time_elapsed() >= 1.0);
  // The last checkpoint holds the elapsed time: a resumed fit stops at once.
  REQUIRE(fs::exists(root + "/checkpoints/last.ckpt"));
  auto model2 = make_model<CountingModel>(1, 100);
  Trainer again(o);
  again.fit(*model2, train, nullptr, root + "/checkpoints/last.ckpt");
  CHECK(model2->train_batches.size() <= 1);
}

TEST_CASE("An unset max_epochs has no limit when max_time or a Timer bounds the fit, as Lightning", "[monitors]") {
  TrainerOptions o;
  CHECK(o.effective_max_epochs() == 1000);
  o.max_time = Duration(60);
  CHECK(o.effective_max_epochs() == std::numeric_limits<int64_t>::max());
  // A Timer of the user's lifts the 1000-epoch default too: one-batch epochs run until it stops them.
  auto model = make_model<CountingModel>(1, /*sleep_ms=*/1);
  DataLoader train = make_loader(8, 8);
  TrainerOptions q = quiet_options(temp_dir("timer_epochs"));
  q.max_epochs.reset();
  TimerOptions to;
  to.duration = Duration(0.3);
  to.verbose = false;
  Trainer trainer(q, {std::make_shared<Timer>(to)});
  CHECK(trainer.max_epochs() == 1000);
  trainer.fit(*model, train);
  CHECK(trainer.max_epochs() == std::numeric_limits<int64_t>::max());
  CHECK(trainer.should_stop);
  CHECK(trainer.current_epoch() >= 1);
}

TEST_CASE("fast_dev_run runs n batches of each loop and writes no checkpoint or log", "[monitors]") {
  const std::string root = temp_dir("fast_dev_run");
  auto model = make_model<CountingModel>(1);
  DataLoader train = make_loader(64, 8), val = make_loader(64, 8);
  TrainerOptions o = quiet_options(root);
  o.max_epochs = 5;
  o.num_sanity_val_steps = 2;
  o.enable_checkpointing = true;
  o.fast_dev_run = 3;
  Trainer trainer(o);
  trainer.fit(*model, train, &val);
  CHECK(model->train_batches.size() == 3);
  CHECK(model->val_steps == 3);  // no sanity check, one validation of 3 batches
  CHECK(trainer.global_step() == 3);
  CHECK(trainer.current_epoch() == 0);
  trainer.test(*model, val);
  CHECK(model->test_steps == 3);
  CHECK(trainer.logger() == nullptr);
  CHECK(count_files(root) == 0);

  auto decode = [](const std::string& y) {
    return options_from_yaml<TrainerOptions>(YAML::Load(y), "trainer").fast_dev_run.batches;
  };
  CHECK(decode("fast_dev_run: true") == 1);
  CHECK(decode("fast_dev_run: false") == 0);
  CHECK(decode("fast_dev_run: 7") == 7);
  CHECK_THROWS_AS(decode("fast_dev_run: [1]"), ConfigError);
}

TEST_CASE("overfit_batches trains on the same batches every epoch and limits validation alike", "[monitors]") {
  const std::string root = temp_dir("overfit");
  auto model = make_model<CountingModel>(1);
  DataLoader train = make_loader(64, 8, /*shuffle=*/true, /*seed=*/3), val = make_loader(64, 8);
  TrainerOptions o = quiet_options(root);
  o.max_epochs = 3;
  o.overfit_batches = BatchLimit::count(2);
  Trainer trainer(o);
  trainer.fit(*model, train, &val);
  REQUIRE(model->train_batches.size() == 6);
  for (int e = 1; e < 3; ++e)
    for (int b = 0; b < 2; ++b) CHECK(torch::equal(model->train_batches[e * 2 + b], model->train_batches[b]));
  CHECK_FALSE(torch::equal(model->train_batches[0], model->train_batches[1]));
  CHECK(model->val_steps == 3 * 2);

  // A fraction: a quarter of the 8 batches.
  auto model2 = make_model<CountingModel>(1);
  o.overfit_batches = BatchLimit::fraction(0.25);
  o.max_epochs = 1;
  Trainer t2(o);
  t2.fit(*model2, train, &val);
  CHECK(model2->train_batches.size() == 2);
}
