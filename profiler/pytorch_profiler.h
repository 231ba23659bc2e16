#pragma once
/// PyTorchProfiler: LibTorch's own profiler over fit, written as a Chrome trace (open it in
/// chrome://tracing or https://ui.perfetto.dev). Every ATen operator the training thread runs is
/// an event, and volt's phases and hooks (profiler.h) are record_function ranges around them, so
/// "backward" or "[Callback]ModelCheckpoint.on_train_epoch_end" show which operators they ran. It
/// keeps the simple profiler's table too (SimpleProfiler), printed and written at teardown.
///
/// The trace goes to <dirpath>/<filename>.json (trace.json; trace-rank<N>.json on rank N > 0).
/// It uses LibTorch's legacy (CPU-side) profiler, present in 1.13 and 2.x: events of the
/// thread that ran setup() (the training thread), CUDA kernels as their launching operators.
///
/// Ownership: owned by the Trainer. Thread-safety: as SimpleProfiler; ranges opened on another
/// thread are closed on it (scopes are RAII).
#include <memory>
#include <string>

#include "volt/profiler/simple_profiler.h"

namespace torch::autograd::profiler {
struct RecordProfile;
}

namespace volt {

class PyTorchProfiler : public SimpleProfiler {
 public:
  /// `dirpath` "" = the directory setup() is given; `filename` "" = "trace".
  explicit PyTorchProfiler(std::string dirpath = "", std::string filename = "");
  ~PyTorchProfiler() override;

  void* start(std::string_view action) override;
  void stop(std::string_view action, double seconds, void* token) override;
  /// Starts LibTorch's profiler on the calling thread. Throws ConfigError naming the trace when
  /// its folder cannot be created or the trace cannot be written there.
  void setup(const std::string& stage, const std::string& dir, int64_t rank) override;
  /// Stops it and writes the trace, then the table (SimpleProfiler::teardown). Throws volt::Error
  /// naming the trace when it could not be written (after the table).
  void teardown() override;

  /// The trace's path (set by setup()).
  const std::string& trace_path() const { return trace_path_; }

 private:
  std::string trace_dirpath_, trace_filename_, trace_path_;
  std::unique_ptr<torch::autograd::profiler::RecordProfile> recording_;
};

}  // namespace volt
