#pragma once
/// Where a step's time goes, by operator and kernel: LibTorch's profiler (the Kineto API, as
/// torch.profiler.profile) records what runs between start() and stop(), and OpSummary sums it by
/// name: count and total time, host operators (aten::mm, ...) and, on a GPU with a LibTorch built
/// with Kineto (the PyTorch wheels), device kernels. bench_gpu --profile prints its table for the
/// last steps of a run; a Chrome trace is written where Kineto is available.
///
/// Ownership: plain value after stop(). Thread-safety: start() and stop() on one thread; the
/// profiler records the operators of every thread while on.
#include <cstdint>
#include <string>
#include <vector>

namespace volt {

class OpSummary {
 public:
  struct Row {
    std::string name;
    bool device = false;  ///< a kernel (or memcpy/memset) on the GPU; else a host operator
    int64_t count = 0;    ///< occurrences
    double total_us = 0;  ///< summed duration, microseconds
  };

  /// Starts recording host operators, and CUDA kernels too when `cuda` and a GPU is visible. Throws
  /// c10::Error when a profiler is already on in this thread.
  void start(bool cuda);
  /// Stops and sums. With `trace_path` non-empty, writes a Chrome trace there when this LibTorch
  /// has Kineto; returns whether it did.
  bool stop(const std::string& trace_path = "");
  bool running() const { return running_; }

  /// Device kernels first, then host operators; each by total time, largest first.
  const std::vector<Row>& rows() const { return rows_; }
  /// Total of the device rows (host rows nest, so they have no meaningful total), microseconds.
  double device_total_us() const;
  /// A text table of the `top` largest device rows and the `top` largest host rows, with each
  /// row's share of its kind's time (host operators: of the largest, which holds the others) and
  /// its time per step.
  std::string table(size_t top, int64_t steps) const;

 private:
  std::vector<Row> rows_;
  bool running_ = false;
};

}  // namespace volt
