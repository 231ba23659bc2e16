// Unit tests of CSVLogger: the files of Lightning's CSVLogger (metrics.csv, hparams.yaml) in
// versioned folders, written on flush.
#include <sys/mount.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "boring_model.h"
#include "volt/core/errors.h"
#include "volt/loggers/csv_logger.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> lines_in(const std::string& path) {
  std::vector<std::string> out;
  std::ifstream in(path);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

}  // namespace

TEST_CASE("CSVLogger writes metrics.csv only on flush, appending the rows not yet written", "[unit][loggers][csv]") {
  CSVLogger log(temp_dir("csv-unit"));
  const std::string path = log.log_dir() + "/metrics.csv";
  log.log_metrics({{"loss", 2.5}}, 0);
  log.log_metrics({{"loss", 1.5}}, 1);
  CHECK_FALSE(fs::exists(path));  // buffered

  log.flush();
  CHECK(lines_in(path) == std::vector<std::string>{"loss,step", "2.5,0", "1.5,1"});
  log.flush();  // nothing new: nothing written
  CHECK(lines_in(path) == std::vector<std::string>{"loss,step", "2.5,0", "1.5,1"});

  // Known keys only: the new row is appended; a row written before is not touched again (the
  // file's earlier bytes survive an edit made between flushes).
  { std::ofstream(path, std::ios::app) << "# marker\n"; }
  log.log_metrics({{"loss", 0.5}}, 2);
  log.flush();
  CHECK(lines_in(path) == std::vector<std::string>{"loss,step", "2.5,0", "1.5,1", "# marker", "0.5,2"});
}

TEST_CASE("CSVLogger keeps Lightning's sorted header and rewrites the file when a key appears",
          "[unit][loggers][csv]") {
  CSVLogger log(temp_dir("csv-unit"));
  const std::string path = log.log_dir() + "/metrics.csv";
  log.log_metrics({{"d_val", 4.0}, {"b_train", 2.0}}, 3);
  log.flush();
  CHECK(lines_in(path) == std::vector<std::string>{"b_train,d_val,step", "2,4,3"});

  // "c_mid" sorts between the existing columns: the whole file is rewritten, old rows padded.
  log.log_metrics({{"c_mid", 3.0}}, 4);
  log.log_metrics({{"b_train", 1.0}, {"epoch", 1.0}}, 5);
  log.flush();
  CHECK(lines_in(path) == std::vector<std::string>{"b_train,c_mid,d_val,epoch,step", "2,,4,,3", ",3,,,4", "1,,,1,5"});

  // Keys appearing between two flushes and logged without a flush are both kept.
  log.log_metrics({{"a_first", 0.5}}, 6);
  log.log_metrics({{"z_last", 9.0}}, 7);
  log.flush();
  const auto lines = lines_in(path);
  REQUIRE(lines.size() == 6);
  CHECK(lines[0] == "a_first,b_train,c_mid,d_val,epoch,step,z_last");
  CHECK(lines[1] == ",2,,4,,3,");
  CHECK(lines[4] == "0.5,,,,,6,");
  CHECK(lines[5] == ",,,,,7,9");
}

TEST_CASE("CSVLogger cells: integral step and epoch, ten significant digits otherwise", "[unit][loggers][csv]") {
  CSVLogger log(temp_dir("csv-unit"));
  // "step" comes from the argument, whatever the metrics say; epoch is written as an integer.
  log.log_metrics({{"epoch", 3.0}, {"step", 99.0}, {"third", 1.0 / 3.0}, {"tiny", 1e-7}, {"big", 123456.789}}, 12);
  log.log_metrics({{"epoch", 4.0}, {"third", -2.0}, {"tiny", 0.0}, {"big", 1e12}}, 13);
  log.flush();
  CHECK(lines_in(log.log_dir() + "/metrics.csv") ==
        std::vector<std::string>{"big,epoch,step,third,tiny", "123456.789,3,12,0.3333333333,1e-07", "1e+12,4,13,-2,0"});
}

TEST_CASE("CSVLogger writes hparams.yaml and config.yaml into its version folder", "[unit][loggers][csv]") {
  CSVLogger log(temp_dir("csv-unit"));
  log.log_hyperparams(YAML::Load("lr: 0.05\nlayers: [4, 8]\noptim: {name: adam, betas: [0.9, 0.99]}\n"));
  const auto hp = YAML::LoadFile(log.log_dir() + "/hparams.yaml");
  CHECK(hp["lr"].as<double>() == 0.05);
  CHECK(hp["layers"].as<std::vector<int>>() == std::vector<int>{4, 8});
  CHECK(hp["optim"]["name"].as<std::string>() == "adam");
  CHECK(hp["optim"]["betas"][1].as<double>() == 0.99);
  // Logging again replaces the file.
  log.log_hyperparams(YAML::Load("lr: 0.1\n"));
  const auto hp2 = YAML::LoadFile(log.log_dir() + "/hparams.yaml");
  CHECK(hp2["lr"].as<double>() == 0.1);
  CHECK_FALSE(hp2["layers"]);

  log.save_config(YAML::Load("trainer: {max_epochs: 3}\nmodel: {hidden: 16}\n"));
  const auto cfg = YAML::LoadFile(log.log_dir() + "/config.yaml");
  CHECK(cfg["trainer"]["max_epochs"].as<int>() == 3);
  CHECK(cfg["model"]["hidden"].as<int>() == 16);
  CHECK_FALSE(fs::exists(log.log_dir() + "/metrics.csv"));  // nothing logged, nothing flushed
}

TEST_CASE("CSVLogger versions: next free number under root/name, explicit versions reused", "[unit][loggers][csv]") {
  const std::string root = temp_dir("csv-unit");
  const fs::path logs = fs::path(root) / "lightning_logs";
  fs::create_directories(logs / "version_3");
  fs::create_directories(logs / "version_x");      // not a number: ignored
  fs::create_directories(logs / "old_version_9");  // not the prefix: ignored
  CSVLogger a(root);
  CHECK(a.version() == 4);
  CHECK(a.log_dir() == (logs / "version_4").string());
  CHECK(fs::is_directory(a.log_dir()));
  CSVLogger b(root);
  CHECK(b.version() == 5);

  // An explicit version is used as is, even if it exists already (resuming into the same folder).
  a.log_metrics({{"x", 1.0}}, 0);
  a.flush();
  CSVLogger again(root, "lightning_logs", 4);
  CHECK(again.version() == 4);
  CHECK(again.log_dir() == a.log_dir());
  CHECK(fs::exists(a.log_dir() + "/metrics.csv"));

  // Another experiment name counts from 0 in its own folder.
  CSVLogger other(root, "exp");
  CHECK(other.version() == 0);
  CHECK(other.log_dir() == (fs::path(root) / "exp" / "version_0").string());
}

TEST_CASE("CSVLogger versions: loggers created at once in one root get distinct versions", "[unit][loggers][csv]") {
  // Two runs started together both saw the same highest version_N and both wrote into N + 1.
  const std::string root = temp_dir("csv-race");
  constexpr int kRuns = 8;
  std::vector<int64_t> versions(kRuns, -1);
  std::atomic<int> ready{0};
  std::vector<std::thread> runs;
  for (int i = 0; i < kRuns; ++i)
    runs.emplace_back([&, i] {
      ++ready;
      while (ready.load() < kRuns) std::this_thread::yield();
      versions[static_cast<size_t>(i)] = CSVLogger(root).version();
    });
  for (auto& t : runs) t.join();
  std::sort(versions.begin(), versions.end());
  for (int i = 0; i < kRuns; ++i) CHECK(versions[static_cast<size_t>(i)] == i);
  // A file named like the next version is skipped, not an error.
  { std::ofstream(root + "/lightning_logs/version_" + std::to_string(kRuns)) << "x"; }
  CHECK(CSVLogger(root).version() == kRuns + 1);
}

TEST_CASE("CSVLogger reports a root it cannot create as a ConfigError", "[unit][loggers][csv]") {
  const std::string root = temp_dir("csv-unit");
  { std::ofstream(root + "/a_file") << "x"; }
  try {
    CSVLogger log(root + "/a_file/logs");
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Catch::Matchers::Contains("cannot create log directory"));
  }
}

TEST_CASE("CSVLogger: a full disk is an error naming the file, and the metrics already written stay",
          "[unit][loggers][csv]") {
  if (!fs::exists("/dev/full")) {
    WARN("no /dev/full: skipped");
    return;
  }
  {  // a new key rewrites the file through metrics.csv.tmp: that write fails, metrics.csv stays
    CSVLogger log(temp_dir("csv-full"));
    const std::string path = log.log_dir() + "/metrics.csv";
    log.log_metrics({{"loss", 2.5}}, 0);
    log.flush();
    const auto before = lines_in(path);
    REQUIRE(before.size() == 2);
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    fs::create_symlink("/dev/full", tmp);
    log.log_metrics({{"acc", 0.5}}, 1);
    try {
      log.flush();
      FAIL("flushed");
    } catch (const volt::Error& e) {
      CHECK_THAT(std::string(e.what()),
                 Catch::Matchers::Contains(path) && Catch::Matchers::Contains("No space left on device"));
    }
    CHECK(lines_in(path) == before);
    CHECK_FALSE(fs::exists(fs::symlink_status(tmp)));  // the temporary file does not stay
  }
  {  // hparams.yaml and config.yaml are replaced whole or not at all (they were emptied before)
    CSVLogger log(temp_dir("csv-full"));
    log.log_hyperparams(YAML::Load("lr: 0.05\n"));
    log.save_config(YAML::Load("trainer: {max_steps: 3}\n"));
    for (const std::string f : {"hparams.yaml", "config.yaml"}) {
      const std::string path = log.log_dir() + "/" + f;
      fs::create_symlink("/dev/full", path + ".tmp." + std::to_string(::getpid()));
      try {
        if (f == "hparams.yaml")
          log.log_hyperparams(YAML::Load("lr: 0.1\n"));
        else
          log.save_config(YAML::Load("trainer: {max_steps: 4}\n"));
        FAIL("written");
      } catch (const volt::Error& e) {
        CHECK_THAT(std::string(e.what()), Catch::Matchers::Contains(path));
      }
    }
    CHECK(YAML::LoadFile(log.log_dir() + "/hparams.yaml")["lr"].as<double>() == 0.05);
    CHECK(YAML::LoadFile(log.log_dir() + "/config.yaml")["trainer"]["max_steps"].as<int>() == 3);
  }
  {  // appending rows of known keys fails too
    CSVLogger log(temp_dir("csv-full"));
    const std::string path = log.log_dir() + "/metrics.csv";
    log.log_metrics({{"loss", 2.5}}, 0);
    log.flush();
    fs::remove(path);
    fs::create_symlink("/dev/full", path);
    log.log_metrics({{"loss", 1.5}}, 1);
    try {
      log.flush();
      FAIL("flushed");
    } catch (const volt::Error& e) {
      CHECK_THAT(std::string(e.what()), Catch::Matchers::Contains(path));
    }
  }
}

TEST_CASE("CSVLogger: a disk that fills in the middle of a row keeps whole rows only", "[unit][loggers][csv]") {
  // A small tmpfs of this test's own (root only; skipped elsewhere), filled but for a few hundred bytes.
  const std::string mnt = temp_dir("csv-tmpfs");
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=64k") != 0) {
    WARN("cannot mount a tmpfs here (" << std::strerror(errno) << "): skipped");
    return;
  }
  struct Unmount {
    std::string at;
    ~Unmount() { ::umount2(at.c_str(), MNT_DETACH); }
  } unmount{mnt};
  CSVLogger log(mnt + "/logs", "lightning_logs", -1, /*flush_logs_every_n_steps=*/1000000);
  const std::string path = log.log_dir() + "/metrics.csv";
  log.log_metrics({{"loss", 2.5}}, 0);
  log.flush();
  {
    std::ofstream fill(mnt + "/fill", std::ios::binary);
    const std::string block(512, 'x');
    while (fill.write(block.data(), static_cast<std::streamsize>(block.size())) && fill.flush()) {
    }
  }
  // Free two pages (tmpfs counts pages): some 12 KB of rows fit, the next is cut by ENOSPC.
  fs::resize_file(mnt + "/fill", fs::file_size(mnt + "/fill") - 2 * 4096);
  for (int64_t s = 1; s < 2000; ++s) log.log_metrics({{"loss", 1.0 / 3.0 + static_cast<double>(s)}}, s);
  CHECK_THROWS_AS(log.flush(), volt::Error);
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE_FALSE(text.empty());
  CHECK(text.back() == '\n');
  for (const auto& line : lines_in(path)) CHECK(std::count(line.begin(), line.end(), ',') == 1);
}
