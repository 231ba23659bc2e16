#include "volt/profiler/op_summary.h"

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "volt/core/compat.h"

namespace volt {

namespace {
namespace prof = torch::profiler::impl;

double duration_us(const torch::autograd::profiler::KinetoEvent& e) {
#if VOLT_TORCH_AT_LEAST(2, 1)
  return static_cast<double>(e.durationNs()) / 1000.0;
#else
  return static_cast<double>(e.durationUs());
#endif
}

prof::ProfilerConfig kineto_config() { return prof::ProfilerConfig(prof::ProfilerState::KINETO); }
}  // namespace

void OpSummary::start(bool cuda) {
  TORCH_CHECK(!running_, "OpSummary::start: already recording");
  std::set<prof::ActivityType> activities{prof::ActivityType::CPU};
  if (cuda && torch::cuda::is_available()) activities.insert(prof::ActivityType::CUDA);
  const auto config = kineto_config();
  torch::autograd::profiler::prepareProfiler(config, activities);
  torch::autograd::profiler::enableProfiler(config, activities);
  running_ = true;
  rows_.clear();
}

bool OpSummary::stop(const std::string& trace_path) {
  TORCH_CHECK(running_, "OpSummary::stop: not recording");
  running_ = false;
  auto result = torch::autograd::profiler::disableProfiler();
  std::map<std::pair<bool, std::string>, Row> by_name;
  for (const auto& e : result->events()) {
    const bool device = e.deviceType() != c10::DeviceType::CPU;
    Row& r = by_name[{device, e.name()}];
    r.name = e.name();
    r.device = device;
    ++r.count;
    r.total_us += duration_us(e);
  }
  rows_.clear();
  for (auto& kv : by_name) rows_.push_back(std::move(kv.second));
  std::stable_sort(rows_.begin(), rows_.end(), [](const Row& a, const Row& b) {
    if (a.device != b.device) return a.device;
    return a.total_us > b.total_us;
  });
  if (trace_path.empty()) return false;
  try {
    result->save(trace_path);  // needs Kineto (the wheels have it; Debian's 1.13 has not)
    return true;
  } catch (const c10::Error&) {
    return false;
  }
}

double OpSummary::device_total_us() const {
  double t = 0;
  for (const auto& r : rows_)
    if (r.device) t += r.total_us;
  return t;
}

std::string OpSummary::table(size_t top, int64_t steps) const {
  const double per = steps > 0 ? static_cast<double>(steps) : 1.0;
  std::string out;
  char line[512];
  auto section = [&](bool device, const char* title, double whole) {
    std::snprintf(line, sizeof line, "%-9s | %-70s | %8s | %12s | %6s\n", title, "name", "calls", "ms a step",
                  device ? "share" : "of top");
    out += line;
    size_t shown = 0;
    for (const auto& r : rows_) {
      if (r.device != device || shown == top) continue;
      ++shown;
      const std::string name = r.name.size() > 70 ? r.name.substr(0, 67) + "..." : r.name;
      std::snprintf(line, sizeof line, "%-9s | %-70s | %8lld | %12.3f | %5.1f%%\n", "", name.c_str(),
                    static_cast<long long>(r.count), r.total_us / per / 1000.0,
                    whole > 0 ? 100.0 * r.total_us / whole : 0.0);
      out += line;
    }
    if (shown == 0) out += device ? "          (no device rows: no GPU, or no Kineto in this LibTorch)\n" : "";
  };
  section(true, "device", device_total_us());
  double top_host = 0;
  for (const auto& r : rows_)
    if (!r.device) top_host = std::max(top_host, r.total_us);
  section(false, "host", top_host);
  return out;
}

}  // namespace volt
