#pragma once
// Shared helpers of the checkpoint tests: raw file bytes, expecting a CheckpointError, comparing
// tensor maps.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "volt/core/errors.h"

namespace volt::testing {

inline std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& path, const char* data, size_t n) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data, static_cast<std::streamsize>(n));
}

/// Runs f, expects a CheckpointError, returns its message.
template <class F>
std::string checkpoint_error(F&& f) {
  try {
    f();
  } catch (const CheckpointError& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("expected a CheckpointError, got: " << e.what());
  }
  FAIL("expected a CheckpointError, nothing was thrown");
  return {};
}

/// Same keys, and under each the same dtype, shape and values (bitwise).
inline void check_same_tensors(const std::map<std::string, torch::Tensor>& a,
                               const std::map<std::string, torch::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (const auto& [k, v] : a) {
    INFO(k);
    REQUIRE(b.count(k));
    CHECK(b.at(k).scalar_type() == v.scalar_type());
    CHECK(b.at(k).sizes() == v.sizes());
    CHECK(torch::equal(b.at(k), v));
  }
}

}  // namespace volt::testing
