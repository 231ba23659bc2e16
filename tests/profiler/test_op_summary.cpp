// OpSummary: LibTorch's profiler events summed by name (what bench_gpu --profile prints).
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "boring_model.h"
#include "volt/profiler/op_summary.h"

using namespace volt;

TEST_CASE("OpSummary counts and times the operators run while it records", "[profiler][op_summary]") {
  auto a = torch::randn({128, 128});
  torch::mm(a, a);  // before: not counted
  OpSummary s;
  s.start(/*cuda=*/false);
  for (int i = 0; i < 3; ++i) a = torch::mm(a, a).tanh();
  a.sum();
  const std::string trace = volt::testing::temp_dir("op-summary") + "/trace.json";
  const bool wrote = s.stop(trace);
  torch::mm(a, a);  // after: not counted
  CHECK(wrote == std::filesystem::exists(trace));
  const OpSummary::Row* mm = nullptr;
  const OpSummary::Row* tanh = nullptr;
  for (const auto& r : s.rows()) {
    CHECK_FALSE(r.device);  // no GPU here
    if (r.name == "aten::mm") mm = &r;
    if (r.name == "aten::tanh") tanh = &r;
  }
  REQUIRE(mm != nullptr);
  REQUIRE(tanh != nullptr);
  CHECK(mm->count == 3);
  CHECK(tanh->count == 3);
  CHECK(mm->total_us > 0);
  // Largest first.
  for (size_t i = 1; i < s.rows().size(); ++i) CHECK(s.rows()[i - 1].total_us >= s.rows()[i].total_us);
  CHECK(s.device_total_us() == 0);
  const std::string table = s.table(5, 3);
  CHECK_THAT(table, Catch::Contains("aten::mm"));
  CHECK_THAT(table, Catch::Contains("no device rows"));
}

TEST_CASE("OpSummary refuses a second start and a stop without start", "[profiler][op_summary]") {
  OpSummary s;
  CHECK_THROWS(s.stop());
  s.start(false);
  CHECK(s.running());
  CHECK_THROWS(s.start(false));
  s.stop();
  CHECK_FALSE(s.running());
}
