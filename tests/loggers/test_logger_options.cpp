// trainer.logger in YAML and C++ (every accepted form and the errors), the loggers it creates,
// LoggerCollection's fan-out, and a user's own Logger given to the Trainer.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "trainer/trainer_support.h"
#include "volt/core/errors.h"
#include "volt/loggers/csv_logger.h"
#include "volt/loggers/logger_collection.h"
#include "volt/loggers/logger_options.h"
#include "volt/loggers/tensorboard_logger.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;

namespace {

LoggerOptions parse(const std::string& yaml) {
  auto o = options_from_yaml<TrainerOptions>(YAML::Load("logger: " + yaml), "trainer");
  o.logger.validate();
  return o.logger;
}

std::vector<std::string> kinds(const LoggerOptions& o) {
  std::vector<std::string> out;
  for (const auto& c : o.loggers) out.push_back(c.kind);
  return out;
}

std::string config_error(const std::string& yaml) {
  try {
    parse(yaml);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

/// A user's logger: records every call.
class RecordingLogger : public Logger {
 public:
  explicit RecordingLogger(std::string dir = "", bool fail_flush = false) : dir_(std::move(dir)), fail_(fail_flush) {}
  std::string name() const override { return "rec"; }
  int64_t version() const override { return 7; }
  std::string log_dir() const override { return dir_; }
  void log_metrics(const std::map<std::string, double>& m, int64_t step) override {
    for (const auto& kv : m) metrics.push_back({kv.first, step});
  }
  void log_hyperparams(const YAML::Node& hp, const std::map<std::string, double>&) override {
    calls.push_back("log_hyperparams");
    hparams = hp;
  }
  void save_config(const YAML::Node&) override { calls.push_back("save_config"); }
  void flush() override {
    calls.push_back("flush");
    if (fail_) throw Error("flush failed: " + dir_);
  }
  void finalize(const std::string& status) override {
    calls.push_back("finalize " + status);
    flush();
  }
  std::vector<std::pair<std::string, int64_t>> metrics;
  std::vector<std::string> calls;
  YAML::Node hparams;

 private:
  std::string dir_;
  bool fail_;
};

}  // namespace

TEST_CASE("trainer.logger: true, false, null, a name, a list, class_path entries", "[unit][loggers]") {
  CHECK(kinds(TrainerOptions().logger) == std::vector<std::string>{"csv"});  // the default
  CHECK(kinds(parse("true")) == std::vector<std::string>{"csv"});
  CHECK(kinds(parse("null")) == std::vector<std::string>{"csv"});  // Lightning: None is the default
  CHECK(parse("false").loggers.empty());
  CHECK_FALSE(parse("false"));
  CHECK(kinds(parse("tensorboard")) == std::vector<std::string>{"tensorboard"});
  CHECK(kinds(parse("CSV")) == std::vector<std::string>{"csv"});
  CHECK(kinds(parse("TensorBoardLogger")) == std::vector<std::string>{"tensorboard"});
  CHECK(kinds(parse("lightning.pytorch.loggers.TensorBoardLogger")) == std::vector<std::string>{"tensorboard"});
  CHECK(kinds(parse("[csv, tensorboard]")) == std::vector<std::string>{"csv", "tensorboard"});
  CHECK(parse("[]").loggers.empty());

  const auto full = parse(
      "[{class_path: TensorBoardLogger, init_args: {save_dir: tb, name: exp, version: 3, default_hp_metric: false}},"
      " {class_path: lightning.pytorch.loggers.CSVLogger, init_args: {name: csvexp}}, tensorboard]");
  REQUIRE(full.loggers.size() == 3);
  const auto& tb = full.loggers[0];
  CHECK(tb.kind == "tensorboard");
  CHECK(tb.save_dir == "tb");
  CHECK(tb.name == "exp");
  CHECK(tb.version == 3);
  CHECK_FALSE(tb.default_hp_metric);
  CHECK(full.loggers[1].kind == "csv");
  CHECK(full.loggers[1].name == "csvexp");
  CHECK(full.loggers[1].save_dir.empty());
  CHECK_FALSE(full.loggers[1].version.has_value());
  CHECK(full.loggers[2].default_hp_metric);
  // A single class_path map, without a list; init_args may be left out.
  const auto one = parse("{class_path: CSVLogger}");
  CHECK(kinds(one) == std::vector<std::string>{"csv"});

  // Written back: `true` for the default, `false` for none, else the full form, which reads back
  // to the same options.
  using Codec = volt::detail::YamlCodec<LoggerOptions>;
  CHECK(Codec::encode(LoggerOptions()).as<bool>() == true);
  CHECK(Codec::encode(LoggerOptions(false)).as<bool>() == false);
  const YAML::Node written = Codec::encode(full);
  REQUIRE(written.IsSequence());
  CHECK(written[0]["class_path"].as<std::string>() == "TensorBoardLogger");
  CHECK(written[0]["init_args"]["version"].as<int>() == 3);
  CHECK(written[1]["class_path"].as<std::string>() == "CSVLogger");
  CHECK_FALSE(written[1]["init_args"]["default_hp_metric"]);  // a CSVLogger has no such argument
  const auto again = Codec::decode(written, "trainer.logger");
  REQUIRE(again.loggers.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(again.loggers[i].kind == full.loggers[i].kind);
    CHECK(again.loggers[i].save_dir == full.loggers[i].save_dir);
    CHECK(again.loggers[i].name == full.loggers[i].name);
    CHECK(again.loggers[i].version == full.loggers[i].version);
    CHECK(again.loggers[i].default_hp_metric == full.loggers[i].default_hp_metric);
  }
  CHECK(Codec::encode(parse("csv")).as<bool>() == true);
  CHECK(Codec::encode(parse("tensorboard")).IsSequence());
}

TEST_CASE("trainer.logger errors name the key and list the choices", "[unit][loggers]") {
  using Catch::Matchers::Contains;
  CHECK_THAT(config_error("tensorbord"),
             Contains("'trainer.logger'") && Contains("unknown logger 'tensorbord'") && Contains("csv, tensorboard"));
  CHECK_THAT(config_error("[csv, wandb]"), Contains("'trainer.logger[1]'") && Contains("'wandb'"));
  CHECK_THAT(config_error("3"), Contains("unknown logger '3'"));
  CHECK_THAT(config_error("[{class_path: WandbLogger}]"),
             Contains("'trainer.logger[0].class_path'") && Contains("CSVLogger, TensorBoardLogger"));
  CHECK_THAT(config_error("[{class_path: TensorBoardLogger, init_args: {no_such_key: 10}}]"),
             Contains("trainer.logger[0].init_args.no_such_key"));
  CHECK_THAT(config_error("[{class_path: TensorBoardLogger, init_args: {flush_secs: -1}}]"),
             Contains("trainer.logger[0].init_args.flush_secs"));
  CHECK_THAT(config_error("[{class_path: CSVLogger, init_args: {default_hp_metric: false}}]"),
             Contains("trainer.logger[0].init_args.default_hp_metric"));
  CHECK_THAT(config_error("[{class_path: CSVLogger, save_dir: x}]"),
             Contains("trainer.logger[0].save_dir") && Contains("class_path, init_args"));
  CHECK_THAT(config_error("[{init_args: {name: x}}]"), Contains("needs class_path"));
  CHECK_THAT(config_error("[{class_path: CSVLogger, init_args: {version: -2}}]"),
             Contains("trainer.logger[0].init_args.version"));
  CHECK_THAT(config_error("[{class_path: CSVLogger, init_args: {version: x}}]"),
             Contains("trainer.logger[0].init_args.version"));
  CHECK_THAT(config_error("[[csv]]"), Contains("trainer.logger[0]"));

  // The same checks for options set in C++.
  TrainerOptions o;
  o.logger = {"csv", "wandb"};
  try {
    o.validate();
    FAIL("validated");
  } catch (const ConfigError& e) {
    CHECK_THAT(std::string(e.what()), Contains("'trainer.logger[1]'") && Contains("'wandb'"));
  }
}

TEST_CASE("trainer.logger in C++: bool, a name, a list", "[unit][loggers]") {
  TrainerOptions o;
  CHECK(o.logger);
  o.logger = false;
  CHECK_FALSE(o.logger);
  o.logger = true;
  CHECK(kinds(o.logger) == std::vector<std::string>{"csv"});
  o.logger = "TensorBoardLogger";
  o.validate();
  CHECK(kinds(o.logger) == std::vector<std::string>{"tensorboard"});
  o.logger = {"csv", "tensorboard"};
  CHECK(kinds(o.logger) == std::vector<std::string>{"csv", "tensorboard"});
  LoggerConfig tb("tensorboard");
  tb.name = "exp";
  o.logger = {tb};
  CHECK(o.logger.loggers.at(0).name == "exp");
}

TEST_CASE("create_loggers: save_dir defaults to default_root_dir, one version folder per save_dir and name",
          "[unit][loggers]") {
  const std::string root = temp_dir("create-loggers");
  fs::create_directories(root + "/lightning_logs/version_1");
  LoggerConfig pinned("csv");
  pinned.version = 7;
  LoggerConfig other("csv");
  other.name = "other";
  LoggerConfig elsewhere("csv");
  elsewhere.save_dir = root + "/elsewhere";
  std::vector<LoggerConfig> list = {"csv", pinned, other, elsewhere};
  if (TensorBoardLogger::available()) list.insert(list.begin() + 1, LoggerConfig("tensorboard"));
  auto loggers = create_loggers(LoggerOptions(list), root);
  REQUIRE(loggers.size() == list.size());
  const std::string shared = (fs::path(root) / "lightning_logs" / "version_2").string();
  CHECK(loggers[0]->log_dir() == shared);
  CHECK(dynamic_cast<CSVLogger*>(loggers[0].get()) != nullptr);
  size_t i = 1;
  if (TensorBoardLogger::available()) {
    CHECK(dynamic_cast<TensorBoardLogger*>(loggers[1].get()) != nullptr);
    CHECK(loggers[i++]->log_dir() == shared);  // the same folder as the CSV logger
  }
  CHECK(loggers[i++]->log_dir() == (fs::path(root) / "lightning_logs" / "version_7").string());
  CHECK(loggers[i++]->log_dir() == (fs::path(root) / "other" / "version_0").string());
  CHECK(loggers[i++]->log_dir() == (fs::path(root) / "elsewhere" / "lightning_logs" / "version_0").string());
  // A later run takes the next folder.
  auto next = create_loggers(LoggerOptions("csv"), root);
  CHECK(next.at(0)->version() == 8);
}

TEST_CASE("LoggerCollection fans out, flushes all despite a failure, saves config.yaml once per folder",
          "[unit][loggers]") {
  auto a = std::make_shared<RecordingLogger>("/tmp/a");
  auto b = std::make_shared<RecordingLogger>("/tmp/a", /*fail_flush=*/true);
  auto c = std::make_shared<RecordingLogger>("/tmp/c");
  LoggerCollection all({a, b, c});
  CHECK(all.name() == "rec");
  CHECK(all.version() == 7);
  CHECK(all.log_dir() == "/tmp/a");
  all.log_metrics({{"loss", 1.0}}, 5);
  for (auto* l : {a.get(), b.get(), c.get()})
    CHECK(l->metrics == std::vector<std::pair<std::string, int64_t>>{{"loss", 5}});
  all.save_config(YAML::Load("a: 1"));
  CHECK(a->calls == std::vector<std::string>{"save_config"});
  CHECK(b->calls.empty());  // same folder as a
  CHECK(c->calls == std::vector<std::string>{"save_config"});
  CHECK_THROWS_WITH(all.flush(), Catch::Matchers::Contains("flush failed: /tmp/a"));
  CHECK(c->calls.back() == "flush");  // reached although b failed before it
  CHECK_THROWS_AS(LoggerCollection({a, nullptr}), ConfigError);
  CHECK(LoggerCollection({}).log_dir().empty());
}

TEST_CASE("Trainer::set_loggers: a user's Logger gets the metrics, hparams and the final status",
          "[loggers][trainer]") {
  auto opts = quiet_options(temp_dir("user-logger"));
  opts.log_every_n_steps = 1;
  auto rec = std::make_shared<RecordingLogger>();
  auto csv = std::make_shared<CSVLogger>(opts.default_root_dir, "mine");
  Trainer t(opts);
  t.set_loggers({rec, csv});
  auto m = make_model(0);
  auto train = make_loader(32, 8);
  t.fit(*m, train);
  REQUIRE(t.loggers().size() == 2);
  CHECK(t.logger() == rec.get());
  CHECK(t.log_dir().empty());  // the first logger's, which has none
  size_t train_loss = 0;
  for (const auto& [k, step] : rec->metrics) train_loss += k == "train_loss";
  CHECK(train_loss == 4);
  REQUIRE(!rec->calls.empty());
  CHECK(rec->calls.front() == "log_hyperparams");
  CHECK(rec->calls.back() == "flush");
  CHECK(std::find(rec->calls.begin(), rec->calls.end(), "finalize success") != rec->calls.end());
  CHECK(read_csv(csv->log_dir() + "/metrics.csv").col("train_loss") >= 0);
  CHECK_FALSE(fs::exists(opts.default_root_dir + "/lightning_logs"));  // options.logger was replaced
  CHECK_THROWS_AS(t.set_loggers({}), ConfigError);                     // too late

  // set_loggers({}) turns logging off.
  Trainer quiet(quiet_options(temp_dir("user-logger-none")));
  quiet.set_loggers({});
  auto m2 = make_model(0);
  quiet.fit(*m2, train);
  CHECK(quiet.loggers().empty());
  CHECK(quiet.log_dir().empty());
}

namespace {
class Exploding : public BoringModel {
 public:
  torch::Tensor training_step(const Batch& b, int64_t i) override {
    if (i == 2) throw std::runtime_error("boom");
    return BoringModel::training_step(b, i);
  }
};
}  // namespace

TEST_CASE("a failed fit finalizes the loggers with 'failed'", "[loggers][trainer]") {
  auto rec = std::make_shared<RecordingLogger>();
  Trainer t(quiet_options(temp_dir("user-logger-fail")));
  t.set_loggers({rec});
  auto m = make_model<Exploding>(0);
  auto train = make_loader(32, 8);
  CHECK_THROWS_WITH(t.fit(*m, train), Catch::Matchers::Contains("boom"));
  CHECK(std::find(rec->calls.begin(), rec->calls.end(), "finalize failed") != rec->calls.end());
  CHECK(std::find(rec->calls.begin(), rec->calls.end(), "finalize success") == rec->calls.end());
}
