#include "volt/profiler/pytorch_profiler.h"

#include <ATen/record_function.h>
#include <spdlog/spdlog.h>
#include <torch/csrc/autograd/profiler_legacy.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

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
  std::error_code ec;
  std::filesystem::create_directories(d, ec);
  VOLT_CHECK(!ec, ConfigError, "trainer.profiler: pytorch: cannot create the trace folder '", d, "': ", ec.message(),
             "; set trainer.profiler.init_args.dirpath to a writable folder");
  trace_path_ =
      (std::filesystem::path(d) / (trace_filename_ + (rank > 0 ? "-rank" + std::to_string(rank) : "") + ".json"))
          .string();
  {
    // LibTorch's RecordProfile opens the file without checking it: a trace that cannot be written
    // would be lost silently at the end of the run.
    std::ofstream probe(trace_path_, std::ios::trunc);
    VOLT_CHECK(probe.good(), ConfigError, "trainer.profiler: pytorch: cannot write the trace '", trace_path_,
               "': ", std::strerror(errno), "; set trainer.profiler.init_args.dirpath to a writable folder");
  }
  try {
    recording_ = std::make_unique<torch::autograd::profiler::RecordProfile>(trace_path_);
  } catch (const std::exception& e) {
    throw ConfigError(detail::str_cat("trainer.profiler: pytorch: could not start LibTorch's profiler writing ",
                                      trace_path_, ": ", e.what()));
  }
}

namespace {
/// Whether the file's last non-space character closes a JSON object or array.
bool ends_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  in.seekg(0, std::ios::end);
  for (std::streamoff pos = in.tellg(); pos > 0; --pos) {
    in.seekg(pos - 1);
    const int c = in.get();
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    return c == '}' || c == ']';
  }
  return false;
}
}  // namespace

void PyTorchProfiler::teardown() {
  std::string error;
  if (recording_) {
    try {
      recording_.reset();  // writes the trace
    } catch (const std::exception& e) {
      error = e.what();
    }
    std::error_code ec;
    const auto size = std::filesystem::file_size(trace_path_, ec);
    if (error.empty() && (ec || size == 0)) error = ec ? ec.message() : "nothing was written (a full disk?)";
    // LibTorch writes the trace through an unchecked stream: a full disk cuts it short silently. A
    // whole Chrome trace is one JSON object or array, so its last character closes it.
    if (error.empty() && !ends_json(trace_path_)) error = "the trace is cut short (a full disk?)";
    if (error.empty()) spdlog::info("PyTorchProfiler: Chrome trace written to {}", trace_path_);
  }
  SimpleProfiler::teardown();  // the table, whatever became of the trace
  VOLT_CHECK(error.empty(), Error, "PyTorchProfiler: the Chrome trace '", trace_path_, "' was not written: ", error);
}

}  // namespace volt
