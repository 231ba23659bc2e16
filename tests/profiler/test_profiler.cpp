// The profilers (trainer.profiler): scopes, the simple profiler's table and counts over a fit,
// LibTorch's Chrome trace with volt's ranges, and the option's YAML forms.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <thread>
#include <vector>

#include "boring_model.h"
#include "trainer/trainer_support.h"
#include "volt/core/errors.h"
#include "volt/profiler/profiler_options.h"
#include "volt/profiler/pytorch_profiler.h"
#include "volt/profiler/simple_profiler.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

/// Options for a fit of `steps` optimizer steps over 8 batches an epoch, validating every 4.
TrainerOptions profiled_options(const std::string& root, const char* profiler, int64_t steps) {
  TrainerOptions o = quiet_options(root);
  o.max_epochs = -1;
  o.max_steps = steps;
  o.val_check_interval = BatchLimit::count(4);
  o.limit_val_batches = BatchLimit::count(2);
  o.enable_checkpointing = true;
  o.profiler = profiler;
  return o;
}

}  // namespace

TEST_CASE("a scope with no profiler records nothing and a SimpleProfiler counts and times", "[profiler]") {
  { auto s = profile(nullptr, "nothing"); }
  SimpleProfiler p;
  p.setup("fit", temp_dir("profiler_unit"), 0);
  for (int i = 0; i < 3; ++i) {
    auto outer = profile(&p, "outer");
    auto inner = p.profile("inner");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  {
    Profiler::Scope moved;
    moved = Profiler::Scope(&p, std::string("built") + "_name");
    moved.end();
    moved.end();  // idempotent
  }
  auto stats = p.stats();
  REQUIRE(stats.size() == 3);
  CHECK(stats["outer"].count == 3);
  CHECK(stats["inner"].count == 3);
  CHECK(stats["built_name"].count == 1);
  CHECK(stats["outer"].total >= 0.006);
  CHECK(stats["outer"].total >= stats["inner"].total);
  const std::string table = p.summary();
  CHECK_THAT(table, Contains("FIT Profiler Report"));
  CHECK_THAT(table, Contains("Mean duration (s)"));
  CHECK_THAT(table, Contains("|  outer"));
  CHECK(table.find("|  outer") < table.find("|  built_name"));  // sorted by total time
}

TEST_CASE("SimpleProfiler counts scopes from several threads", "[profiler]") {
  SimpleProfiler p;
  p.setup("fit", temp_dir("profiler_threads"), 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) auto s = profile(&p, i % 2 ? "odd" : "even");
    });
  for (auto& t : threads) t.join();
  auto stats = p.stats();
  CHECK(stats["odd"].count == 2000);
  CHECK(stats["even"].count == 2000);
}

TEST_CASE("profiler simple: every phase and hook of a fit, counted, in a table beside the logs", "[profiler]") {
  const std::string root = temp_dir("profiler_simple");
  auto model = make_model(1);
  DataLoader train = make_loader(64, 8), val = make_loader(16, 8);
  Trainer trainer(profiled_options(root, "simple", 6));
  trainer.fit(*model, train, &val);
  auto* p = dynamic_cast<SimpleProfiler*>(trainer.profiler());
  REQUIRE(p != nullptr);
  auto stats = p->stats();
  CHECK(stats["optimizer_step"].count == 6);
  CHECK(stats["training_step"].count == 6);
  CHECK(stats["backward"].count == 6);
  CHECK(stats["zero_grad"].count >= 6);
  CHECK(stats["run_training_batch"].count == 6);
  CHECK(stats["run_training_epoch"].count == 1);
  CHECK(stats["run_validation"].count == 1);  // after batch 4 (batch 8 is not reached)
  CHECK(stats["validation_step"].count == 2);
  CHECK(stats["dataloader_next"].count >= 6 + 2);
  CHECK(stats["save_checkpoint"].count >= 1);
  CHECK(stats["[LightningModule]BoringModel.on_train_epoch_end"].count == 1);
  CHECK(stats["[LightningModule]BoringModel.on_train_batch_end"].count == 6);
  CHECK(stats["[Callback]ModelCheckpoint.on_train_epoch_end"].count == 1);
  CHECK(stats["[Callback]ModelCheckpoint.on_train_batch_end"].count == 6);
  CHECK(stats.count("load_checkpoint") == 0);
  // Each phase's time is inside its batch's.
  CHECK(stats["backward"].total <= stats["run_training_batch"].total);

  const std::string path = trainer.log_dir() + "/fit-profile.txt";
  CHECK(p->report_path() == path);
  const std::string text = read_text(path);
  CHECK_THAT(text, Contains("FIT Profiler Report"));
  CHECK_THAT(text, Contains("|  optimizer_step"));
  CHECK_THAT(text, Contains("[Callback]ModelCheckpoint.on_train_epoch_end"));
}

TEST_CASE("no profiler: nothing is recorded or written", "[profiler]") {
  const std::string root = temp_dir("profiler_off");
  auto model = make_model(1);
  DataLoader train = make_loader(32, 8);
  Trainer trainer(profiled_options(root, "", 2));
  CHECK(trainer.profiler() == nullptr);
  CHECK(trainer.strategy().profiler() == nullptr);
  trainer.fit(*model, train);
  CHECK_FALSE(fs::exists(trainer.log_dir() + "/fit-profile.txt"));
  CHECK_FALSE(fs::exists(trainer.log_dir() + "/trace.json"));
}

TEST_CASE("profiler pytorch: a Chrome trace with volt's ranges around LibTorch's operators", "[profiler]") {
  const std::string root = temp_dir("profiler_pytorch");
  auto model = make_model(1);
  DataLoader train = make_loader(32, 8);
  Trainer trainer(profiled_options(root, "pytorch", 3));
  trainer.fit(*model, train);
  auto* p = dynamic_cast<PyTorchProfiler*>(trainer.profiler());
  REQUIRE(p != nullptr);
  CHECK(p->trace_path() == trainer.log_dir() + "/trace.json");
  const std::string trace = read_text(p->trace_path());
  REQUIRE(!trace.empty());
  // Minimal well-formedness: a JSON array of objects, brackets and braces balanced outside strings.
  const size_t first = trace.find_first_not_of(" \n\r\t"), last = trace.find_last_not_of(" \n\r\t");
  REQUIRE(first != std::string::npos);
  CHECK(trace[first] == '[');
  CHECK(trace[last] == ']');
  int depth = 0, min_depth = 1 << 20;
  bool in_string = false, escaped = false;
  for (size_t i = first; i <= last; ++i) {
    const char c = trace[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    if (c == '[' || c == '{') ++depth;
    if (c == ']' || c == '}') --depth;
    if (i < last) min_depth = std::min(min_depth, depth);
  }
  CHECK(depth == 0);
  CHECK(min_depth >= 1);
  CHECK_FALSE(in_string);
  for (const char* range : {"\"training_step\"", "\"backward\"", "\"optimizer_step\"", "\"run_training_batch\"",
                            "\"[LightningModule]BoringModel.on_train_batch_end\""})
    CHECK_THAT(trace, Contains(range));
  CHECK_THAT(trace, Contains("\"aten::addmm\""));
  CHECK_THAT(trace, Contains("\"ph\": \"X\""));
  // Python's json parser agrees, where it is installed.
  if (fs::exists("/usr/bin/python3")) {
    const std::string cmd =
        "/usr/bin/python3 -c \"import json,sys; e=json.load(open(sys.argv[1])); "
        "assert isinstance(e, list) and len(e) > 10\" '" +
        p->trace_path() + "'";
    CHECK(std::system(cmd.c_str()) == 0);
  }
  // The table is kept too.
  CHECK(p->stats()["optimizer_step"].count == 3);
}

TEST_CASE("trainer.profiler takes a name, a class path with init_args or null", "[profiler]") {
  auto decode = [](const std::string& yaml) {
    auto o = options_from_yaml<TrainerOptions>(YAML::Load(yaml), "trainer");
    o.validate();
    return o.profiler;
  };
  CHECK(decode("{}").kind.empty());
  CHECK(decode("profiler: null").kind.empty());
  CHECK(decode("profiler: simple").kind == "simple");
  CHECK(decode("profiler: PyTorchProfiler").kind == "pytorch");
  auto o = decode("profiler: {class_path: SimpleProfiler, init_args: {dirpath: /tmp/p, filename: run1}}");
  CHECK(o.kind == "simple");
  CHECK(o.dirpath == "/tmp/p");
  CHECK(o.filename == "run1");
  CHECK_THROWS_WITH(decode("profiler: advanced"), Contains("trainer.profiler") && Contains("simple, pytorch"));
  CHECK_THROWS_WITH(decode("profiler: {class_path: simple, init_args: {dir: x}}"),
                    Contains("trainer.profiler.init_args.dir"));
  // Written back as it was given.
  CHECK(options_to_yaml(TrainerOptions{})["profiler"].IsNull());
  TrainerOptions t;
  t.profiler = o;
  const YAML::Node back = options_to_yaml(t)["profiler"];
  CHECK(back["class_path"].as<std::string>() == "SimpleProfiler");
  CHECK(back["init_args"]["filename"].as<std::string>() == "run1");
}

TEST_CASE("SimpleProfiler writes to its dirpath and filename", "[profiler]") {
  const std::string root = temp_dir("profiler_dirpath");
  auto model = make_model(1);
  DataLoader train = make_loader(16, 8);
  TrainerOptions o = profiled_options(root, "", 2);
  o.profiler.kind = "simple";
  o.profiler.dirpath = root + "/prof";
  o.profiler.filename = "run1";
  Trainer trainer(o);
  trainer.fit(*model, train);
  CHECK_THAT(read_text(root + "/prof/fit-run1.txt"), Contains("|  backward"));
}

// Not run by default: `volt_tests "[.profiler_overhead]"` prints the time of one fit with each profiler.
TEST_CASE("profiler overhead on a small fit", "[.profiler_overhead]") {
  const std::string root = temp_dir("profiler_overhead");
  for (int rep = 0; rep < 2; ++rep)
    for (const char* kind : {"", "simple", "pytorch"}) {
      auto model = make_model(1);
      DataLoader train = make_loader(4096, 8);
      TrainerOptions o = profiled_options(root, kind, 400);
      o.enable_checkpointing = false;
      o.logger = false;
      o.profiler.dirpath = root;
      Trainer trainer(o);
      const auto t0 = std::chrono::steady_clock::now();
      trainer.fit(*model, train);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      WARN("profiler '" << kind << "': 400 steps in " << s << " s (" << s / 400 * 1e6 << " us/step)");
    }
}
