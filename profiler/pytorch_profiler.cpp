#include "volt/profiler/pytorch_profiler.h"

#include <ATen/record_function.h>
#include <spdlog/spdlog.h>
#include <torch/csrc/autograd/profiler_legacy.h>

#include <filesystem>

#include "volt/core/errors.h"

namespace volt {

PyTorchProfiler::PyTorchProfiler(std::string dirpath, std::string filename)
    : SimpleProfiler(dirpath, ""),
      trace_dirpath_(std::move(dirpath)),
      trace_filename_(filename.empty() ? "trace" : std::move(filename)) {}

PyTorchProfiler::~PyTorchProfiler() {
  try {
    recording_.reset();
  } catch (...) {  // a destructor must not throw; the trace is lost
  }
}

void* PyTorchProfiler::start(std::string_view action) {
  // A user-scope range, as Python's torch.profiler.record_function opens.
  auto* rf = new at::RecordFunction(at::RecordScope::USER_SCOPE);
  if (rf->isActive()) rf->before(std::string(action));
  return rf;
}

void PyTorchProfiler::stop(std::string_view action, double seconds, void* token) {
  delete static_cast<at::RecordFunction*>(token);  // ends the range
  SimpleProfiler::stop(action, seconds, token);
}

void PyTorchProfiler::setup(const std::string& stage, const std::string& dir, int64_t rank) {
  SimpleProfiler::setup(stage, dir, rank);
  recording_.reset();
  const std::string d = trace_dirpath_.empty() ? (dir.empty() ? "." : dir) : trace_dirpath_;
  std::filesystem::create_directories(d);
  trace_path_ =
      (std::filesystem::path(d) / (trace_filename_ + (rank > 0 ? "-rank" + std::to_string(rank) : "") + ".json"))
          .string();
  try {
    recording_ = std::make_unique<torch::autograd::profiler::RecordProfile>(trace_path_);
  } catch (const std::exception& e) {
    throw ConfigError(detail::str_cat("trainer.profiler: pytorch: could not start LibTorch's profiler writing ",
                                      trace_path_, ": ", e.what()));
  }
}

void PyTorchProfiler::teardown() {
  if (recording_) try {
      recording_.reset();  // writes the trace
      spdlog::info("PyTorchProfiler: Chrome trace written to {}", trace_path_);
    } catch (const std::exception& e) {
      spdlog::warn("PyTorchProfiler: could not write {}: {}", trace_path_, e.what());
    }
  SimpleProfiler::teardown();
}

}  // namespace volt
