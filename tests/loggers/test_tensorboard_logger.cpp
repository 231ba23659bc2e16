// TensorBoard's event files, checked against the format rather than against TensorBoard (which is
// not installed here): an independent TFRecord reader (its own bitwise CRC-32C, both masked
// checksums verified, corruption detected) and the generated protobuf classes decoding each Event.
#include <sys/resource.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "trainer/trainer_support.h"
#include "volt/core/errors.h"
#include "volt/loggers/crc32c.h"
#include "volt/loggers/tensorboard_logger.h"
#include "volt/loggers/tfrecord_writer.h"
#include "volt/trainer/trainer.h"

#if __has_include("tensorboard/compat/proto/event.pb.h")
#include "tensorboard/compat/proto/event.pb.h"
#include "tensorboard/plugins/hparams/plugin_data.pb.h"
#include "tensorboard/plugins/text/plugin_data.pb.h"
#define VOLT_TEST_TENSORBOARD 1
#endif

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;

namespace {

// CRC-32C bit by bit, straight from the definition (reflected polynomial 0x82F63B78): independent
// of the table the writer uses.
uint32_t reference_crc32c(const std::string& bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char b : bytes) {
    crc ^= b;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}
uint32_t reference_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

uint64_t read_le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(s[at + i])) << (8 * i);
  return v;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The records of a TFRecord file; throws std::runtime_error on a bad checksum or a torn record.
std::vector<std::string> read_records(const std::string& bytes) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < bytes.size()) {
    if (bytes.size() - at < 12) throw std::runtime_error("torn header at " + std::to_string(at));
    const std::string len_bytes = bytes.substr(at, 8);
    const uint64_t len = read_le(bytes, at, 8);
    if (read_le(bytes, at + 8, 4) != reference_mask(reference_crc32c(len_bytes)))
      throw std::runtime_error("length checksum mismatch at " + std::to_string(at));
    if (bytes.size() - at - 12 < len + 4) throw std::runtime_error("torn record at " + std::to_string(at));
    const std::string data = bytes.substr(at + 12, len);
    if (read_le(bytes, at + 12 + len, 4) != reference_mask(reference_crc32c(data)))
      throw std::runtime_error("data checksum mismatch at " + std::to_string(at));
    out.push_back(data);
    at += 12 + len + 4;
  }
  return out;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

TEST_CASE("CRC-32C: the standard check values, and TFRecord's mask", "[unit][loggers][tensorboard]") {
  const std::string check = "123456789";
  CHECK(volt::detail::crc32c(check.data(), check.size()) == 0xE3069283u);
  CHECK(reference_crc32c(check) == 0xE3069283u);
  // RFC 3720 (iSCSI) B.4 vectors.
  const std::string zeros(32, '\0'), ones(32, '\xff');
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  CHECK(volt::detail::crc32c(zeros.data(), zeros.size()) == 0x8A9136AAu);
  CHECK(volt::detail::crc32c(ones.data(), ones.size()) == 0x62A8AB43u);
  CHECK(volt::detail::crc32c(ascending.data(), ascending.size()) == 0x46DD794Eu);
  // Continuing a CRC over a second piece is the CRC of the whole.
  CHECK(volt::detail::crc32c(check.data() + 4, 5, volt::detail::crc32c(check.data(), 4)) == 0xE3069283u);
  for (uint32_t c : {0u, 1u, 0xE3069283u, 0xFFFFFFFFu}) {
    CHECK(volt::detail::mask_crc32c(c) == reference_mask(c));
    CHECK(volt::detail::unmask_crc32c(volt::detail::mask_crc32c(c)) == c);
  }
}

TEST_CASE("TFRecordWriter frames records and appends them on flush only", "[unit][loggers][tensorboard]") {
  const std::string path = temp_dir("tfrecord") + "/records";
  std::vector<std::string> payloads = {"first", std::string(300, 'x'), ""};
  payloads[1][7] = '\0';  // binary data is data
  {
    volt::detail::TFRecordWriter w(path);
    for (const auto& p : payloads) w.write(p);
    CHECK(fs::file_size(path) == 0);  // buffered
    w.flush();
    CHECK(w.bytes_written() == 5 + 300 + 0 + 3 * 16);
    CHECK(fs::file_size(path) == w.bytes_written());
    w.write("tail");  // flushed by the destructor
  }
  const std::string bytes = read_bytes(path);
  auto records = read_records(bytes);
  payloads.push_back("tail");
  CHECK(records == payloads);
  // The header is the little-endian length and its masked CRC.
  CHECK(read_le(bytes, 0, 8) == 5);
  CHECK(read_le(bytes, 8, 4) == reference_mask(reference_crc32c(bytes.substr(0, 8))));

  // The reader is able to fail: a flipped data byte, a flipped length byte, a torn tail.
  std::string bad = bytes;
  bad[12 + 2] ^= 0x01;
  CHECK_THROWS_WITH(read_records(bad), Catch::Matchers::Contains("data checksum mismatch at 0"));
  bad = bytes;
  bad[21] ^= 0x01;  // the second record's length (it starts at 5 + 16 = 21)
  CHECK_THROWS_WITH(read_records(bad), Catch::Matchers::Contains("length checksum mismatch at 21"));
  CHECK_THROWS_WITH(read_records(bytes.substr(0, bytes.size() - 1)), Catch::Matchers::Contains("torn record"));

  // An existing file is never overwritten.
  CHECK_THROWS_AS(volt::detail::TFRecordWriter(path), volt::Error);
}

TEST_CASE("TFRecordWriter: a full disk is an error naming the file, the records stay pending",
          "[unit][loggers][tensorboard]") {
  if (!fs::exists("/dev/full")) {
    WARN("no /dev/full: skipped");
    return;
  }
  auto w = volt::detail::TFRecordWriter::open_existing("/dev/full");
  w.write("metrics");
  try {
    w.flush();
    FAIL("flushed");
  } catch (const volt::Error& e) {
    CHECK_THAT(std::string(e.what()),
               Catch::Matchers::Contains("/dev/full") && Catch::Matchers::Contains("No space left on device"));
  }
  CHECK(w.bytes_written() == 0);
  CHECK_THROWS_AS(w.flush(), volt::Error);  // still pending, still failing
}

#ifdef VOLT_TEST_TENSORBOARD

namespace {

std::vector<tensorboard::Event> read_events(const std::string& path) {
  std::vector<tensorboard::Event> out;
  for (const auto& r : read_records(read_bytes(path))) {
    tensorboard::Event e;
    REQUIRE(e.ParseFromString(r));
    out.push_back(e);
  }
  return out;
}

// The scalar events: tag -> (step, value) in file order.
std::map<std::string, std::vector<std::pair<int64_t, float>>> scalars(const std::vector<tensorboard::Event>& events) {
  std::map<std::string, std::vector<std::pair<int64_t, float>>> out;
  for (const auto& e : events)
    if (e.has_summary())
      for (const auto& v : e.summary().value())
        if (v.value_case() == tensorboard::Summary::Value::kSimpleValue)
          out[v.tag()].push_back({e.step(), v.simple_value()});
  return out;
}

tensorboard::hparams::HParamsPluginData hparams_content(const tensorboard::Event& e, const std::string& tag) {
  REQUIRE(e.has_summary());
  REQUIRE(e.summary().value_size() == 1);
  const auto& v = e.summary().value(0);
  CHECK(v.tag() == tag);
  CHECK(v.metadata().plugin_data().plugin_name() == "hparams");
  CHECK(v.value_case() == tensorboard::Summary::Value::VALUE_NOT_SET);
  tensorboard::hparams::HParamsPluginData d;
  REQUIRE(d.ParseFromString(v.metadata().plugin_data().content()));
  CHECK(d.version() == 0);
  return d;
}

}  // namespace

TEST_CASE("TensorBoardLogger: file name, file_version first, scalars, text", "[unit][loggers][tensorboard]") {
  REQUIRE(TensorBoardLogger::available());
  const std::string root = temp_dir("tb-unit");
  fs::create_directories(root + "/lightning_logs/version_4");
  const double t0 = now_seconds();
  TensorBoardLogger log(root);
  CHECK(log.version() == 5);
  CHECK(log.name() == "lightning_logs");
  CHECK(log.log_dir() == (fs::path(root) / "lightning_logs" / "version_5").string());
  const std::string file = fs::path(log.event_file()).filename().string();
  CHECK(fs::path(log.event_file()).parent_path() == fs::path(log.log_dir()));
  // events.out.tfevents.<10-digit seconds>.<host>.<pid>.<n>
  REQUIRE(file.rfind("events.out.tfevents.", 0) == 0);
  const std::string stamp = file.substr(20, 10);
  CHECK(std::all_of(stamp.begin(), stamp.end(), ::isdigit));
  CHECK(std::abs(std::stod(stamp) - t0) < 5);
  CHECK(file.substr(file.size() - 2) == ".0");
  CHECK(file.find("." + std::to_string(::getpid()) + ".") != std::string::npos);

  log.log_metrics({{"loss", 0.5}, {"acc", 1.0 / 3.0}}, 3);
  log.log_metrics({{"loss", 0.25}}, 4);
  log.log_text("notes", "step 4: ok \xc3\xa9", 4);
  const auto before_flush = read_events(log.event_file());
  CHECK(before_flush.size() == 1);  // the file_version event is flushed at once; the rest on flush
  log.flush();
  const double t1 = now_seconds();

  const auto events = read_events(log.event_file());
  REQUIRE(events.size() == 5);
  CHECK(events[0].file_version() == "brain.Event:2");
  CHECK(events[0].step() == 0);
  for (const auto& e : events) {
    CHECK(e.wall_time() >= t0 - 1e-3);
    CHECK(e.wall_time() <= t1 + 1e-3);
  }
  // One Event per metric, a simple_value (float32) with its tag and step.
  const auto s = scalars(events);
  REQUIRE(s.size() == 2);
  CHECK(s.at("loss") == std::vector<std::pair<int64_t, float>>{{3, 0.5f}, {4, 0.25f}});
  CHECK(s.at("acc") == std::vector<std::pair<int64_t, float>>{{3, static_cast<float>(1.0 / 3.0)}});
  for (size_t i = 1; i < 4; ++i) CHECK(events[i].summary().value_size() == 1);

  // Text: the text plugin's summary, a DT_STRING tensor of shape [1].
  const auto& text = events[4];
  CHECK(text.step() == 4);
  REQUIRE(text.summary().value_size() == 1);
  const auto& v = text.summary().value(0);
  CHECK(v.tag() == "notes/text_summary");
  CHECK(v.metadata().plugin_data().plugin_name() == "text");
  tensorboard::TextPluginData tp;
  REQUIRE(tp.ParseFromString(v.metadata().plugin_data().content()));
  CHECK(tp.version() == 0);
  REQUIRE(v.value_case() == tensorboard::Summary::Value::kTensor);
  CHECK(v.tensor().dtype() == tensorboard::DT_STRING);
  REQUIRE(v.tensor().tensor_shape().dim_size() == 1);
  CHECK(v.tensor().tensor_shape().dim(0).size() == 1);
  REQUIRE(v.tensor().string_val_size() == 1);
  CHECK(v.tensor().string_val(0) == "step 4: ok \xc3\xa9");

  // A second logger in the same folder (an explicit version) gets the next file number.
  TensorBoardLogger again(root, "lightning_logs", 5);
  CHECK(again.log_dir() == log.log_dir());
  CHECK(again.event_file() != log.event_file());
}

TEST_CASE("TensorBoardLogger: hyper-parameters as the HParams plugin writes them, and hparams.yaml",
          "[unit][loggers][tensorboard]") {
  const YAML::Node hp = YAML::Load(
      "lr: 0.01\nname: mlp\nquoted: '3'\nflag: true\nmodel: {layers: 3, act: tanh}\nsizes: [1, 2]\nnothing: null\n");
  SECTION("no metrics: hp_metric = -1 at step 0, as Lightning's default_hp_metric") {
    TensorBoardLogger log(temp_dir("tb-hp"));
    log.log_hyperparams(hp);
    log.flush();
    const auto events = read_events(log.event_file());
    REQUIRE(events.size() == 5);
    CHECK(scalars(events) == std::map<std::string, std::vector<std::pair<int64_t, float>>>{{"hp_metric", {{0, -1.f}}}});

    const auto exp = hparams_content(events[2], "_hparams_/experiment");
    REQUIRE(exp.has_experiment());
    std::map<std::string, tensorboard::hparams::DataType> types;
    for (const auto& info : exp.experiment().hparam_infos()) types[info.name()] = info.type();
    namespace hpb = tensorboard::hparams;
    CHECK(types == std::map<std::string, hpb::DataType>{{"lr", hpb::DATA_TYPE_FLOAT64},
                                                        {"name", hpb::DATA_TYPE_STRING},
                                                        {"quoted", hpb::DATA_TYPE_STRING},
                                                        {"flag", hpb::DATA_TYPE_BOOL},
                                                        {"model/layers", hpb::DATA_TYPE_FLOAT64},
                                                        {"model/act", hpb::DATA_TYPE_STRING},
                                                        {"sizes", hpb::DATA_TYPE_STRING}});
    REQUIRE(exp.experiment().metric_infos_size() == 1);
    CHECK(exp.experiment().metric_infos(0).name().tag() == "hp_metric");

    const auto start = hparams_content(events[3], "_hparams_/session_start_info");
    REQUIRE(start.has_session_start_info());
    const auto& values = start.session_start_info().hparams();
    CHECK(values.size() == 7);
    CHECK(values.at("lr").number_value() == 0.01);
    CHECK(values.at("model/layers").number_value() == 3);
    CHECK(values.at("name").string_value() == "mlp");
    CHECK(values.at("quoted").string_value() == "3");
    CHECK(values.at("flag").bool_value());
    CHECK(values.at("sizes").string_value() == "[1, 2]");
    CHECK(values.count("nothing") == 0);

    const auto end = hparams_content(events[4], "_hparams_/session_end_info");
    REQUIRE(end.has_session_end_info());
    CHECK(end.session_end_info().status() == tensorboard::hparams::STATUS_SUCCESS);

    const auto saved = YAML::LoadFile(log.log_dir() + "/hparams.yaml");
    CHECK(saved["lr"].as<double>() == 0.01);
    CHECK(saved["model"]["act"].as<std::string>() == "tanh");
  }
  SECTION("given metrics are logged at step 0 and named in the experiment") {
    TensorBoardLogger log(temp_dir("tb-hp"));
    log.log_hyperparams(hp, {{"val_loss", 1.5}, {"val_acc", 0.5}});
    log.flush();
    const auto events = read_events(log.event_file());
    REQUIRE(events.size() == 6);
    CHECK(scalars(events).at("val_loss") == std::vector<std::pair<int64_t, float>>{{0, 1.5f}});
    const auto exp = hparams_content(events[3], "_hparams_/experiment");
    std::vector<std::string> tags;
    for (const auto& m : exp.experiment().metric_infos()) tags.push_back(m.name().tag());
    CHECK(tags == std::vector<std::string>{"val_acc", "val_loss"});
  }
  SECTION("default_hp_metric false and no metrics: hparams.yaml only, no HParams entry") {
    TensorBoardLogger log(temp_dir("tb-hp"), "exp", -1, false);
    log.log_hyperparams(hp);
    log.flush();
    CHECK(read_events(log.event_file()).size() == 1);
    CHECK(fs::exists(log.log_dir() + "/hparams.yaml"));
  }
}

TEST_CASE("TensorBoardLogger: a failed flush names the event file and cuts back to whole records",
          "[unit][loggers][tensorboard]") {
  TensorBoardLogger log(temp_dir("tb-fail"));
  log.log_metrics({{"loss", 1.0}}, 0);
  log.flush();
  const auto size = fs::file_size(log.event_file());
  log.log_metrics({{"loss", 2.0}, {"acc", 0.5}}, 1);
  // A file size limit 10 bytes above the current size: the append is cut short (EFBIG after a
  // partial write), as a disk filling up mid-write would.
  rlimit old{};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
  auto* previous = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old;
  small.rlim_cur = static_cast<rlim_t>(size + 10);
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
  std::string error;
  try {
    log.flush();
  } catch (const volt::Error& e) {
    error = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, previous);
  CHECK_THAT(error, Catch::Matchers::Contains(log.event_file()) && Catch::Matchers::Contains("File too large"));
  CHECK(fs::file_size(log.event_file()) == size);  // the partial record was cut off
  CHECK(read_events(log.event_file()).size() == 2);
  log.flush();  // the events stayed pending: a later flush writes them
  const auto s = scalars(read_events(log.event_file()));
  CHECK(s.at("loss") == std::vector<std::pair<int64_t, float>>{{0, 1.f}, {1, 2.f}});
  CHECK(s.at("acc") == std::vector<std::pair<int64_t, float>>{{1, 0.5f}});
}

TEST_CASE("Trainer with logger [csv, tensorboard]: one version folder, the same metrics in both",
          "[loggers][tensorboard][trainer]") {
  const std::string root = temp_dir("tb-trainer");
  auto opts = quiet_options(root);
  opts.log_every_n_steps = 1;
  opts.logger = options_from_yaml<TrainerOptions>(YAML::Load("logger: [csv, tensorboard]"), "trainer").logger;
  Trainer t(opts);
  auto m = make_model(0);
  auto train = make_loader(64, 8);
  auto val = make_loader(16, 8);
  t.fit(*m, train, &val);

  REQUIRE(t.loggers().size() == 2);
  CHECK(dynamic_cast<CSVLogger*>(t.logger()) != nullptr);
  auto* tb = dynamic_cast<TensorBoardLogger*>(t.loggers()[1].get());
  REQUIRE(tb != nullptr);
  CHECK(t.log_dir() == (fs::path(root) / "lightning_logs" / "version_0").string());
  CHECK(tb->log_dir() == t.log_dir());
  CHECK(fs::exists(t.log_dir() + "/metrics.csv"));
  CHECK(fs::exists(t.log_dir() + "/hparams.yaml"));

  const auto csv = read_csv(t.log_dir() + "/metrics.csv");
  const auto events = read_events(tb->event_file());
  CHECK(events.front().file_version() == "brain.Event:2");
  const auto s = scalars(events);
  // Every value of metrics.csv is in the event file at the same step (as float32), and no more.
  const int step_col = csv.col("step");
  REQUIRE(step_col >= 0);
  size_t compared = 0;
  std::map<std::string, size_t> per_tag;
  for (const auto& row : csv.rows)
    for (size_t c = 0; c < csv.header.size(); ++c) {
      if (static_cast<int>(c) == step_col || c >= row.size() || row[c].empty()) continue;
      const std::string& tag = csv.header[c];
      REQUIRE(s.count(tag));
      const size_t i = per_tag[tag]++;
      REQUIRE(i < s.at(tag).size());
      CHECK(s.at(tag)[i].first == std::stoll(row[step_col]));
      CHECK(s.at(tag)[i].second == Approx(std::stod(row[c])).epsilon(1e-6));
      ++compared;
    }
  for (const auto& [tag, n] : per_tag) CHECK(s.at(tag).size() == n);
  CHECK(s.size() == per_tag.size() + 1);  // and hp_metric, the HParams entry's default metric
  CHECK(s.at("hp_metric") == std::vector<std::pair<int64_t, float>>{{0, -1.f}});
  CHECK(per_tag.at("train_loss") == 8);
  CHECK(compared >= 8 + 8);  // train_loss and epoch at each step, then the epoch's rows
  // The train losses are the model's.
  for (size_t i = 0; i < 8; ++i) CHECK(s.at("train_loss")[i].second == Approx(m->losses[i]).epsilon(1e-6));
}

#else

TEST_CASE("TensorBoardLogger without protobuf reports that it is not built in", "[unit][loggers][tensorboard]") {
  CHECK_FALSE(TensorBoardLogger::available());
  CHECK_THROWS_AS(TensorBoardLogger(temp_dir("tb-none")), ConfigError);
}

#endif
