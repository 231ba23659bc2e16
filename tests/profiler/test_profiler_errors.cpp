// PyTorchProfiler where its trace cannot be written: fit fails before training, naming the trace, or
// (when it fails only at the end) fails once, after the run finished.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "boring_model.h"
#include "trainer/trainer_support.h"
#include "volt/core/errors.h"
#include "volt/profiler/profiler_options.h"
#include "volt/profiler/pytorch_profiler.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;
using Catch::Matchers::Contains;

TEST_CASE("PyTorchProfiler into a folder it cannot write fails fit before training, naming the trace", "[profiler]") {
  const std::string root = temp_dir("profiler-unwritable");
  { std::ofstream(root + "/a-file") << "x"; }
  // /proc/self exists, and no file can be created in it (not even by root); a-file/sub cannot be
  // created because its parent is a file.
  // The section names must not hold `root`: it differs on each run of the test case, and Catch
  // would take each as a new section and run the case forever.
  for (const std::string where : {"/proc/self", "<root>/a-file/sub"}) {
    DYNAMIC_SECTION(where) {
      const std::string dirpath = where == "/proc/self" ? where : root + "/a-file/sub";
      TrainerOptions o = quiet_options(root);
      o.max_steps = 2;
      o.profiler = "pytorch";
      o.profiler.dirpath = dirpath;
      Trainer t(o);
      auto m = make_model(0);
      auto train = make_loader(16, 8);
      try {
        t.fit(*m, train);
        FAIL("fit wrote no trace and did not fail");
      } catch (const ConfigError& e) {
        CHECK_THAT(e.what(), Contains(dirpath) && Contains("trainer.profiler") && Contains("dirpath"));
      }
      CHECK(t.global_step() == 0);  // refused before any training
    }
  }
}

namespace {
/// Counts the failure and teardown hooks; at on_fit_end puts a folder where the trace will be written.
class TraceBlocker : public Callback {
 public:
  std::string state_key() const override { return "TraceBlocker"; }
  void on_fit_end(Trainer& t, LightningModule&) override {
    auto* p = dynamic_cast<PyTorchProfiler*>(t.profiler());
    REQUIRE(p != nullptr);
    std::filesystem::remove(p->trace_path());
    std::filesystem::create_directories(p->trace_path() + "/blocked");
  }
  void on_exception(Trainer&, LightningModule&, const std::exception&) override { ++exceptions; }
  void teardown(Trainer&, LightningModule&, const std::string&) override { ++teardowns; }
  int exceptions = 0, teardowns = 0;
};
}  // namespace

TEST_CASE("PyTorchProfiler whose trace cannot be written at the end fails fit once, after the run finished",
          "[profiler]") {
  const std::string root = temp_dir("profiler-late-failure");
  TrainerOptions o = quiet_options(root);
  o.max_steps = 2;
  o.profiler = "pytorch";
  auto blocker = std::make_shared<TraceBlocker>();
  Trainer t(o, {blocker});
  auto m = make_model(0);
  auto train = make_loader(16, 8);
  try {
    t.fit(*m, train);
    FAIL("fit did not report the unwritten trace");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Contains("trace") && Contains("was not written"));
  }
  CHECK(t.global_step() == 2);      // the run itself completed
  CHECK(blocker->teardowns == 1);   // torn down once, by the successful end
  CHECK(blocker->exceptions == 0);  // no failure path on a trainer that had finished
}
