// Loggers during a run: metrics reach the files mid-epoch (CSVLogger every flush_logs_every_n_steps
// steps, TensorBoardLogger every flush_secs, both at every checkpoint save), every logger gets the
// monitors' values, column names are quoted, an explicit version over an earlier run warns, and
// two loggers of one kind cannot share a folder.
#include <spdlog/sinks/ostream_sink.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "boring_model.h"
#include "trainer/trainer_support.h"
#include "volt/callbacks/model_checkpoint.h"
#include "volt/callbacks/throughput_monitor.h"
#include "volt/core/errors.h"
#include "volt/loggers/csv_logger.h"
#include "volt/loggers/logger_options.h"
#include "volt/loggers/tensorboard_logger.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

size_t line_count(const std::string& path) {
  std::ifstream in(path);
  size_t n = 0;
  for (std::string l; std::getline(in, l);) ++n;
  return n;
}

/// Calls `probe(trainer)` at the start of every training batch (the state on disk so far).
class Probe : public Callback {
 public:
  explicit Probe(std::function<void(Trainer&)> f) : f_(std::move(f)) {}
  std::string state_key() const override { return "Probe"; }
  void on_train_batch_start(Trainer& t, LightningModule&, const Batch&, int64_t) override { f_(t); }

 private:
  std::function<void(Trainer&)> f_;
};

/// spdlog's warnings while it lives.
struct Warnings {
  std::ostringstream text;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(text);
  Warnings() { spdlog::default_logger()->sinks().push_back(sink); }
  ~Warnings() {
    auto& s = spdlog::default_logger()->sinks();
    s.erase(std::find(s.begin(), s.end(), sink));
  }
};

LoggerOptions loggers_from(const std::string& yaml) {
  return options_from_yaml<TrainerOptions>(YAML::Load("logger: " + yaml), "trainer").logger;
}

}  // namespace

TEST_CASE("metrics.csv gets its rows every 100 steps mid-epoch, as Lightning's CSVLogger, and the number is a key",
          "[loggers][csv][flush]") {
  for (const int64_t every : {int64_t{0}, int64_t{30}}) {  // 0: Lightning's default, 100
    DYNAMIC_SECTION("flush_logs_every_n_steps " << (every ? std::to_string(every) : "default")) {
      const std::string root = temp_dir("csv-flush");
      auto o = quiet_options(root);
      o.log_every_n_steps = 1;
      if (every) o.logger = loggers_from("{class_path: CSVLogger, init_args: {flush_logs_every_n_steps: 30}}");
      const int64_t n = every ? every : 100;
      // One epoch of 150 steps: everything before the end of the epoch is mid-epoch.
      std::vector<size_t> rows_at;  // rows in metrics.csv at the start of each step
      auto probe = std::make_shared<Probe>([&](Trainer& t) {
        const std::string csv = t.log_dir() + "/metrics.csv";
        rows_at.push_back(fs::exists(csv) ? line_count(csv) - 1 : 0);
      });
      Trainer t(o, {probe});
      auto m = make_model(0);
      auto train = make_loader(150, 1);
      t.fit(*m, train);
      REQUIRE(rows_at.size() == 150);
      for (size_t step = 0; step < 150; ++step) {
        INFO("step " << step);
        CHECK(rows_at[step] == static_cast<size_t>(step / n * n));  // a row per step, flushed every n
      }
    }
  }
  CHECK_THROWS_WITH(loggers_from("{class_path: CSVLogger, init_args: {flush_logs_every_n_steps: 0}}").validate(),
                    Contains("trainer.logger[0].init_args.flush_logs_every_n_steps") && Contains(">= 1"));
}

TEST_CASE("metrics reach metrics.csv at every checkpoint save", "[loggers][csv][flush]") {
  const std::string root = temp_dir("csv-flush-ckpt");
  auto o = quiet_options(root);
  o.log_every_n_steps = 1;
  o.enable_checkpointing = true;
  ModelCheckpointOptions mo;
  mo.every_n_train_steps = 7;
  std::vector<size_t> rows_at;
  auto probe = std::make_shared<Probe>([&](Trainer& t) {
    const std::string csv = t.log_dir() + "/metrics.csv";
    rows_at.push_back(fs::exists(csv) ? line_count(csv) - 1 : 0);
  });
  Trainer t(o, {std::make_shared<ModelCheckpoint>(mo), probe});
  auto m = make_model(0);
  auto train = make_loader(30, 1);
  t.fit(*m, train);
  REQUIRE(rows_at.size() == 30);
  CHECK(rows_at[6] == 0);
  CHECK(rows_at[7] == 7);  // the save after step 7 wrote the rows of steps 0-6
  CHECK(rows_at[13] == 7);
  CHECK(rows_at[14] == 14);
  CHECK(rows_at[29] == 28);
}

TEST_CASE("the event file gets its events every flush_secs mid-epoch and at checkpoint saves",
          "[loggers][tensorboard][flush]") {
  if (!TensorBoardLogger::available()) return;  // built without protobuf
  SECTION("flush_secs: 0 writes each step's events as they are logged") {
    const std::string root = temp_dir("tb-flush");
    auto o = quiet_options(root);
    o.log_every_n_steps = 1;
    o.logger = loggers_from("{class_path: TensorBoardLogger, init_args: {flush_secs: 0}}");
    std::vector<uintmax_t> sizes;
    auto probe = std::make_shared<Probe>([&](Trainer& t) {
      sizes.push_back(fs::file_size(dynamic_cast<TensorBoardLogger*>(t.logger())->event_file()));
    });
    Trainer t(o, {probe});
    auto m = make_model(0);
    auto train = make_loader(5, 1);
    t.fit(*m, train);
    REQUIRE(sizes.size() == 5);
    for (size_t i = 1; i < sizes.size(); ++i) CHECK(sizes[i] > sizes[i - 1]);
  }
  SECTION("the default (120 s) keeps them buffered until a checkpoint save") {
    const std::string root = temp_dir("tb-flush-ckpt");
    auto o = quiet_options(root);
    o.log_every_n_steps = 1;
    o.logger = loggers_from("tensorboard");
    o.enable_checkpointing = true;
    ModelCheckpointOptions mo;
    mo.every_n_train_steps = 3;
    std::vector<uintmax_t> sizes;
    auto probe = std::make_shared<Probe>([&](Trainer& t) {
      sizes.push_back(fs::file_size(dynamic_cast<TensorBoardLogger*>(t.logger())->event_file()));
    });
    Trainer t(o, {std::make_shared<ModelCheckpoint>(mo), probe});
    auto m = make_model(0);
    auto train = make_loader(5, 1);
    t.fit(*m, train);
    REQUIRE(sizes.size() == 5);
    CHECK(sizes[1] == sizes[0]);  // buffered
    CHECK(sizes[2] == sizes[0]);
    CHECK(sizes[3] > sizes[2]);  // the save after step 3 flushed
  }
  CHECK_THROWS_WITH(loggers_from("{class_path: TensorBoardLogger, init_args: {flush_secs: -1}}").validate(),
                    Contains("trainer.logger[0].init_args.flush_secs"));
}

TEST_CASE("ThroughputMonitor's values reach every logger, not only the first", "[loggers][monitors]") {
  if (!TensorBoardLogger::available()) return;  // built without protobuf
  const std::string root = temp_dir("monitor-loggers");
  auto o = quiet_options(root);
  o.log_every_n_steps = 1;
  o.logger = loggers_from("[tensorboard, csv]");
  ThroughputMonitorOptions to;
  to.window_size = 2;
  Trainer t(o, {std::make_shared<ThroughputMonitor>(to)});
  auto m = make_model(0);
  auto train = make_loader(16, 1);
  t.fit(*m, train);
  const auto csv = read_csv(t.loggers()[1]->log_dir() + "/metrics.csv");
  bool has_throughput = false;
  for (const auto& h : csv.header) has_throughput |= h.rfind("train/", 0) == 0;
  CHECK(has_throughput);
}

TEST_CASE("metrics.csv quotes a column name holding a comma or a quote, as Python's csv module",
          "[unit][loggers][csv]") {
  CSVLogger log(temp_dir("csv-quote"));
  log.log_metrics({{"a,b", 1}, {"say \"x\"", 2}, {"c", 3}}, 0);
  log.flush();
  std::ifstream in(log.log_dir() + "/metrics.csv");
  std::string header, row;
  std::getline(in, header);
  std::getline(in, row);
  CHECK(header == "\"a,b\",c,\"say \"\"x\"\"\",step");
  CHECK(row == "1,3,2,0");
}

TEST_CASE("an explicit logger version over an earlier run's files warns, as Lightning", "[unit][loggers]") {
  const std::string root = temp_dir("logger-version-reuse");
  {
    Warnings w;
    CSVLogger first(root, "lightning_logs", 0);
    first.log_metrics({{"loss", 1}}, 0);
    first.flush();
    first.log_hyperparams(YAML::Load("{lr: 1}"));
    CHECK(w.text.str().empty());  // a fresh folder: nothing to say
  }
  Warnings w;
  CSVLogger again(root, "lightning_logs", 0);
  CHECK_THAT(w.text.str(),
             Contains("version_0") && Contains("metrics.csv") && Contains("hparams.yaml") && Contains("replaces"));
  // The next free version (no explicit one) never warns.
  Warnings w2;
  CSVLogger next(root);
  CHECK(next.version() == 1);
  CHECK(w2.text.str().empty());
}

TEST_CASE("two loggers of one kind writing into one folder are refused, naming both", "[unit][loggers]") {
  CHECK_THROWS_WITH(loggers_from("[csv, csv]").validate(),
                    Contains("trainer.logger[1]") && Contains("trainer.logger[0]") && Contains("same folder"));
  // Different names: each its own folder.
  auto ok =
      loggers_from("[{class_path: CSVLogger, init_args: {name: a}}, {class_path: CSVLogger, init_args: {name: b}}]");
  ok.validate();
  const std::string root = temp_dir("logger-collide");
  CHECK(create_loggers(ok, root).size() == 2);
  // An unset version that resolves to another's explicit one is caught when they are created.
  auto clash = loggers_from("[csv, {class_path: CSVLogger, init_args: {version: 0}}]");
  clash.validate();
  CHECK_THROWS_WITH(create_loggers(clash, temp_dir("logger-collide-2")),
                    Contains("trainer.logger[1]") && Contains("version_0"));
}
