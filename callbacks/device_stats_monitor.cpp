#include "volt/callbacks/device_stats_monitor.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "volt/core/compat.h"
#include "volt/loggers/logger.h"
#include "volt/trainer/trainer.h"

namespace volt {

namespace {
/// The value of `key` ("VmRSS:") in a /proc file of "Key:   123 kB" lines, in bytes; -1 if absent.
int64_t proc_kb(const std::string& text, const std::string& key) {
  size_t pos = text.find(key);
  while (pos != std::string::npos && pos != 0 && text[pos - 1] != '\n') pos = text.find(key, pos + 1);
  if (pos == std::string::npos) return -1;
  std::istringstream in(text.substr(pos + key.size()));
  int64_t kb = -1;
  in >> kb;
  return kb < 0 ? -1 : kb * 1024;
}

std::string read_all(const char* path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
}  // namespace

HostMemory read_host_memory() {
  HostMemory h;
  const std::string status = read_all("/proc/self/status");
  h.rss = proc_kb(status, "VmRSS:");
  h.rss_peak = proc_kb(status, "VmHWM:");
  const std::string meminfo = read_all("/proc/meminfo");
  const int64_t total = proc_kb(meminfo, "MemTotal:"), avail = proc_kb(meminfo, "MemAvailable:");
  if (total > 0 && avail >= 0) h.vm_percent = 100.0 * static_cast<double>(total - avail) / static_cast<double>(total);
  return h;
}

DeviceStatsMonitor::DeviceStatsMonitor(DeviceStatsMonitorOptions options) : options_(options) { options_.validate(); }

std::map<std::string, double> DeviceStatsMonitor::stats(Trainer& t) const {
  std::map<std::string, double> s;
  if (options_.cpu_stats) {
    const HostMemory h = read_host_memory();
    if (h.rss >= 0) s["cpu_rss_bytes"] = static_cast<double>(h.rss);
    if (h.rss_peak >= 0) s["cpu_rss_peak_bytes"] = static_cast<double>(h.rss_peak);
    if (h.vm_percent >= 0) s["cpu_vm_percent"] = h.vm_percent;
  }
  const torch::Device dev = t.strategy().root_device();
  if (dev.is_cuda()) {
    const compat::CudaMemoryStats c = compat::cuda_memory_stats(dev.index());
    s["allocated_bytes.all.current"] = static_cast<double>(c.allocated);
    s["allocated_bytes.all.peak"] = static_cast<double>(c.allocated_peak);
    s["reserved_bytes.all.current"] = static_cast<double>(c.reserved);
    s["reserved_bytes.all.peak"] = static_cast<double>(c.reserved_peak);
  }
  return s;
}

void DeviceStatsMonitor::on_train_batch_end(Trainer& t, LightningModule&, const torch::Tensor&, const Batch&, int64_t) {
  if (t.global_step() % t.options().log_every_n_steps != 0) return;
  last_.clear();
  for (const auto& [k, v] : stats(t)) last_["DeviceStatsMonitor.on_train_batch_end/" + k] = v;
  // The step of this batch's training metrics (the one before this batch's optimizer step counted),
  // as Lightning's _batches_that_stepped: the rows line up with train_loss's.
  const int64_t step = std::max<int64_t>(0, t.global_step() - 1);
  for (const auto& l : t.loggers()) l->log_metrics(last_, step);  // every logger, as Lightning's
}

}  // namespace volt
