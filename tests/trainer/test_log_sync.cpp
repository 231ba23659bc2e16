// sync_dist over 2 real ranks with each reduce_fx (the test worker's LogSyncModel).
#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "distributed/multi_rank.h"
#include "trainer/trainer_support.h"

using namespace volt;
using namespace volt::testing;

namespace {
/// The metrics.csv written under `root` (rank 0's logger).
Csv find_metrics_csv(const std::string& root) {
  for (const auto& e : std::filesystem::recursive_directory_iterator(root))
    if (e.path().filename() == "metrics.csv") return read_csv(e.path().string());
  return {};
}
std::vector<double> cells(const Csv& csv, const std::string& name) {
  std::vector<double> out;
  const int c = csv.col(name);
  if (c < 0) return out;
  for (const auto& r : csv.rows)
    if (c < static_cast<int>(r.size()) && !r[c].empty()) out.push_back(std::stod(r[c]));
  return out;
}
}  // namespace

TEST_CASE("sync_dist on 2 ranks reduces epoch values with each reduce_fx, the mean over every sample",
          "[logging][multirank]") {
  const std::string dir = temp_dir("log-sync");
  auto kv = quiet_worker_kv(dir);
  kv["trainer.max_epochs"] = "1";
  kv["trainer.devices"] = "2";
  kv["trainer.strategy"] = "{name: ddp, timeout: 60}";
  kv["trainer.log_every_n_steps"] = "1";
  kv["samples"] = "64";
  kv["batch_size"] = "8";  // 4 batches per rank
  kv["log_sync"] = "true";
  REQUIRE(run_worker(args_for(dir + "/o.pt", kv), dir, 240) == 0);
  const Csv csv = find_metrics_csv(dir);
  REQUIRE(!csv.header.empty());
  // Rank r logs 10 r + i + 1 at its batch i, weighing batch_size 4 (rank 0) or 2 (rank 1).
  const int n = 4;
  double r0 = 0, r1 = 0;
  for (int i = 0; i < n; ++i) {
    r0 += i + 1;
    r1 += 10 + i + 1;
  }
  const double mean = (4 * r0 + 2 * r1) / (4.0 * n + 2.0 * n);  // 140 / 24, not the mean of means (7.5)
  const auto m = cells(csv, "sync_mean");
  REQUIRE(m.size() == 1);
  CHECK(m[0] == Approx(mean).epsilon(1e-9));  // metrics.csv holds 10 significant digits
  CHECK(cells(csv, "sync_sum") == std::vector<double>{r0 + r1});
  CHECK(cells(csv, "sync_max") == std::vector<double>{10.0 + n});
  CHECK(cells(csv, "sync_min") == std::vector<double>{1.0});
  CHECK(cells(csv, "local_mean") == std::vector<double>{r0 / n});  // rank 0's own, unsynced
  // The step value is reduced when logged: the max over the ranks, at every step.
  CHECK(cells(csv, "step_max") == (std::vector<double>{11, 12, 13, 14}));
}
