#pragma once
// Shared by the refusal tests: what spdlog printed while a test ran, and the words of the error a
// call raised.
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <functional>
#include <memory>
#include <sstream>
#include <string>

#include "volt/core/errors.h"

namespace volt::testing {

/// spdlog's messages (info and up) while it lives.
struct Logs {
  std::ostringstream text;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(text);
  spdlog::level::level_enum level = spdlog::get_level();
  Logs() {
    spdlog::default_logger()->sinks().push_back(sink);
    spdlog::set_level(spdlog::level::info);
  }
  ~Logs() {
    spdlog::set_level(level);
    auto& s = spdlog::default_logger()->sinks();
    s.erase(std::find(s.begin(), s.end(), sink));
  }
  Logs(const Logs&) = delete;
  Logs& operator=(const Logs&) = delete;
};

/// The message of the ConfigError `f` throws; fails the test when it throws none.
inline std::string config_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  FAIL("expected a ConfigError");
  return {};
}

}  // namespace volt::testing
