#include "volt/profiler/simple_profiler.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "volt/core/files.h"

namespace volt {

SimpleProfiler::SimpleProfiler(std::string dirpath, std::string filename)
    : dirpath_(std::move(dirpath)), filename_(filename.empty() ? "profile" : std::move(filename)) {}

void SimpleProfiler::stop(std::string_view action, double seconds, void*) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = stats_.find(action);
  if (it == stats_.end()) it = stats_.emplace(std::string(action), Stat{}).first;
  Stat& s = it->second;
  ++s.count;
  s.total += seconds;
  s.max = std::max(s.max, seconds);
}

void SimpleProfiler::setup(const std::string& stage, const std::string& dir, int64_t rank) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.clear();
  stage_ = stage;
  rank_ = rank;
  const std::string d = dirpath_.empty() ? dir : dirpath_;
  path_ = (std::filesystem::path(d.empty() ? "." : d) / (stage + "-" + filename_ + ".txt")).string();
  t0_ = std::chrono::steady_clock::now();
}

std::map<std::string, SimpleProfiler::Stat> SimpleProfiler::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {stats_.begin(), stats_.end()};
}

std::string SimpleProfiler::summary() const {
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  std::vector<std::pair<std::string, Stat>> rows;
  {
    std::lock_guard<std::mutex> lock(mu_);
    rows.assign(stats_.begin(), stats_.end());
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& a, const auto& b) { return a.second.total > b.second.total; });
  size_t width = 6;
  int64_t calls = 0;
  for (const auto& r : rows) {
    width = std::max(width, r.first.size());
    calls += r.second.count;
  }
  std::string stage = stage_;
  std::transform(stage.begin(), stage.end(), stage.begin(), [](unsigned char c) { return std::toupper(c); });
  auto line = [&](const std::string& action, const std::string& mean, const std::string& n, const std::string& total,
                  const std::string& pct) {
    char buf[160];
    std::string out = "|  " + action + std::string(width - action.size(), ' ');
    std::snprintf(buf, sizeof buf, "  |  %-17s|  %-12s|  %-15s|  %-13s|\n", mean.c_str(), n.c_str(), total.c_str(),
                  pct.c_str());
    return out + buf;
  };
  auto num = [](const char* fmt, double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, fmt, v);
    return std::string(buf);
  };
  const std::string head = line("Action", "Mean duration (s)", "Num calls", "Total time (s)", "Percentage %");
  const std::string rule(head.size() - 1, '-');
  std::string out = stage + " Profiler Report\n\n" + rule + "\n" + head + rule + "\n";
  out += line("Total", "-", std::to_string(calls), num("%.5g", wall), "100 %") + rule + "\n";
  for (const auto& [name, s] : rows)
    out += line(name, num("%.5g", s.total / static_cast<double>(s.count)), std::to_string(s.count),
                num("%.5g", s.total), num("%.4g", wall > 0 ? 100.0 * s.total / wall : 0.0));
  return out + rule + "\n";
}

void SimpleProfiler::teardown() {
  if (rank_ != 0 || path_.empty()) return;  // not set up
  const std::string text = summary();
  spdlog::info("{}", "\n" + text);
  try {
    std::filesystem::create_directories(std::filesystem::path(path_).parent_path());
    const std::string err = detail::write_file_atomic(path_, text);
    if (!err.empty()) spdlog::warn("SimpleProfiler: {} (the table is in the log above)", err);
  } catch (const std::exception& e) {
    spdlog::warn("SimpleProfiler: could not write {}: {}", path_, e.what());
  }
}

}  // namespace volt
