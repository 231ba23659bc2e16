#pragma once
/// DeviceStatsMonitor: memory of the process and of its CUDA device, logged every
/// log_every_n_steps at the end of a training batch (rank 0's loggers), named as Lightning names
/// them: "DeviceStatsMonitor.on_train_batch_end/<stat>" with the stats
///   cpu_rss_bytes, cpu_rss_peak_bytes   the process's resident memory now / at its peak (VmRSS / VmHWM)
///   cpu_vm_percent                      the machine's memory in use, % (as psutil's virtual_memory)
///   allocated_bytes.all.current, allocated_bytes.all.peak, reserved_bytes.all.current,
///   reserved_bytes.all.peak             the CUDA caching allocator's (torch.cuda.memory_stats keys),
///                                       when training on a CUDA device
/// Host figures come from /proc (Linux); elsewhere they are left out.
///
/// Ownership: a callback (shared). Thread-safety: hooks run on the training thread.
#include <cstdint>
#include <map>
#include <string>

#include "volt/callbacks/callback.h"

namespace volt {

/// The process's resident memory (bytes) now and at its peak, and the machine's memory in use (%);
/// -1 where /proc does not tell.
struct HostMemory {
  int64_t rss = -1, rss_peak = -1;
  double vm_percent = -1;
};
HostMemory read_host_memory();

struct DeviceStatsMonitorOptions {
  bool cpu_stats = true;  ///< log the host figures (the CUDA ones are logged whenever on a CUDA device)

  template <class V>
  void visit(V& v) {
    v("cpu_stats", cpu_stats);
  }
  void validate(const std::string& = "DeviceStatsMonitor") const {}
};

class DeviceStatsMonitor : public Callback {
 public:
  explicit DeviceStatsMonitor(DeviceStatsMonitorOptions options = {});
  std::string state_key() const override { return "DeviceStatsMonitor"; }
  void on_train_batch_end(Trainer&, LightningModule&, const torch::Tensor&, const Batch&, int64_t) override;

  /// The stats of this process and device now, without the hook prefix.
  std::map<std::string, double> stats(Trainer& trainer) const;
  /// The last stats logged (with the prefix), for inspection.
  const std::map<std::string, double>& last_metrics() const { return last_; }

 private:
  DeviceStatsMonitorOptions options_;
  std::map<std::string, double> last_;
};

}  // namespace volt
