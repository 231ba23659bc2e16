#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <fstream>
#include <string>

#include "volt/core/compat.h"
#include "volt/core/large_buffer.h"

using namespace volt::detail;

namespace {
/// This process's resident memory (VmRSS), in bytes.
int64_t rss_bytes() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return -1;
}
}  // namespace

TEST_CASE("empty_large maps large CPU buffers on 2 MiB boundaries and gives them back when freed", "[unit][core]") {
  const int64_t n = 16 * 1024 * 1024 / 4 + 3;  // 16 MiB and a bit, not a whole number of pages
  const int64_t before = rss_bytes();
  {
    torch::Tensor t = empty_large(n, torch::kFloat);
    REQUIRE(t.numel() == n);
    CHECK(t.is_contiguous());
    CHECK(t.scalar_type() == torch::kFloat);
    CHECK(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % (size_t{2} << 20) == 0);
    t.fill_(2.0f);
    t.narrow(0, n - 1, 1).fill_(5.0f);  // the last element is inside the mapping
    CHECK(t.sum().item<double>() == Approx(2.0 * (n - 1) + 5.0));
    CHECK(rss_bytes() - before >= 15 * 1024 * 1024);
    // LibTorch operations treat it as any tensor; a copy outlives it.
    torch::Tensor c = (t * 2).narrow(0, 0, 4).clone();
    t = torch::Tensor();
    CHECK(c.sum().item<double>() == 16.0);
  }
  // Unmapped when the last reference went: the memory is the OS's again.
  CHECK(rss_bytes() - before < 8 * 1024 * 1024);
}

TEST_CASE("empty_large falls back to LibTorch's allocator for small buffers and other dtypes work", "[unit][core]") {
  torch::Tensor small = empty_large(1000, torch::kFloat);
  CHECK(small.numel() == 1000);
  CHECK(small.storage().allocator() != nullptr);  // LibTorch's own storage
  torch::Tensor big = empty_large(2 * 1024 * 1024, torch::kBFloat16);
  CHECK(big.nbytes() == 4 * 1024 * 1024);
  CHECK(big.storage().allocator() == nullptr);  // mapped by volt, not resizable
  big.fill_(1.5);
  CHECK(big.to(torch::kFloat).mean().item<float>() == 1.5f);
  torch::Tensor empty = empty_large(0, torch::kFloat);
  CHECK(empty.numel() == 0);
}

TEST_CASE("allocate_large memory becomes a parameter's storage through compat::refill_storage", "[unit][core]") {
  torch::Tensor full = torch::zeros({1 << 20});
  torch::Tensor view = full.narrow(0, 10, 5);
  volt::compat::free_storage(full);
  CHECK(volt::compat::storage_nbytes(full) == 0);
  volt::compat::refill_storage(full, allocate_large(4u << 20), 4u << 20);
  full.fill_(3.0f);
  CHECK(view.sum().item<float>() == 15.0f);  // views made before see the new memory
  volt::compat::free_storage(full);
}

TEST_CASE("Absurd buffer sizes fail with a message that names them", "[unit][core]") {
  // More than any machine maps: the error says how much and what to do, and nothing is left mapped.
  CHECK_THROWS_WITH(allocate_large(size_t{1} << 60),
                    Catch::Contains("could not map") && Catch::Contains("out of memory"));
  CHECK_THROWS_WITH(empty_large(int64_t{1} << 58, torch::kFloat), Catch::Contains("could not map"));
  CHECK_THROWS_WITH(empty_large(-4, torch::kFloat), Catch::Contains("-4 elements"));
}
