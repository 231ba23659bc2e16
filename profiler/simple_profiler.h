#pragma once
/// SimpleProfiler: the count, total and mean time of every phase and hook, and its share of the
/// run's wall time, as Lightning's SimpleProfiler. At teardown rank 0 prints the table through
/// spdlog and writes it to <dirpath>/<stage>-<filename>.txt (fit-profile.txt by default).
///
/// Ownership: owned by the Trainer. Thread-safety: start / stop from any thread (one mutex); the
/// rest from the training thread.
#include <chrono>
#include <map>
#include <mutex>
#include <string>

#include "volt/profiler/profiler.h"

namespace volt {

class SimpleProfiler : public Profiler {
 public:
  struct Stat {
    int64_t count = 0;
    double total = 0;  ///< seconds
    double max = 0;    ///< seconds, the longest call
  };

  /// `dirpath` "" = the directory setup() is given; `filename` "" = "profile".
  explicit SimpleProfiler(std::string dirpath = "", std::string filename = "");

  void stop(std::string_view action, double seconds, void* token) override;
  void setup(const std::string& stage, const std::string& dir, int64_t rank) override;
  void teardown() override;
  std::string summary() const override;

  /// What was recorded since setup(), by action.
  std::map<std::string, Stat> stats() const;
  /// The report's path (set by setup()).
  const std::string& report_path() const { return path_; }

 private:
  std::string dirpath_, filename_, stage_ = "fit", path_;
  int64_t rank_ = 0;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
  mutable std::mutex mu_;
  std::map<std::string, Stat, std::less<>> stats_;
};

}  // namespace volt
