// Exact-size host buffers and their account (core/host_buffers.h): what each buffer asked for and
// holds, by kind, until it is freed. FSDP's use of them: tests/strategies/fsdp/test_offload_host_buffers.cpp.
#include <torch/cuda.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "gpu_visibility.h"
#include "volt/core/compat.h"
#include "volt/core/host_buffers.h"

using namespace volt;

TEST_CASE("host_buffer records exact sizes by kind until the storage is freed", "[core][host_buffers]") {
  const HostBufferStats all0 = host_buffer_stats();
  REQUIRE(host_buffer_stats("test.a").buffers == 0);
  torch::Tensor view;
  {
    torch::Tensor a = host_buffer(1000, torch::kFloat, /*pinned=*/false, "test.a");
    torch::Tensor b = host_buffer(3, torch::kBFloat16, /*pinned=*/true, "test.a");
    torch::Tensor c = host_buffer(4096, torch::kByte, /*pinned=*/false, "test.c");
    REQUIRE(a.numel() == 1000);
    CHECK(a.is_contiguous());
    CHECK(a.device().is_cpu());
    CHECK(b.scalar_type() == torch::kBFloat16);
    // Page-locked only where the build has CUDA (cudaHostAlloc) and a GPU is there to pin for: this
    // case sees none (a CUDA build then allocates pageable memory); the [cuda] case below pins.
    if (!compat::kPinnedHostAlloc || !torch::cuda::is_available()) CHECK_FALSE(b.is_pinned());
    a.fill_(2.0f);
    CHECK(a.sum().item<double>() == 2000.0);

    const HostBufferStats s = host_buffer_stats("test.a");
    CHECK(s.buffers == 2);
    CHECK(s.requested == 1000 * 4 + 3 * 2);
    CHECK(s.held == host_pages_bytes(4000) + host_pages_bytes(6));
    CHECK(host_pages_bytes(4000) >= 4000);
    CHECK(host_pages_bytes(4000) < 4000 + 65536);
    CHECK(host_buffer_stats("test.c").requested == 4096);
    CHECK(host_buffer_stats("test.c").held == host_pages_bytes(4096));
    const HostBufferStats all = host_buffer_stats();
    CHECK(all.buffers == all0.buffers + 3);
    CHECK(all.requested == all0.requested + 4006 + 4096);
    view = a.narrow(0, 10, 5);  // keeps a's storage alive
  }
  CHECK(host_buffer_stats("test.a").buffers == 1);
  CHECK(host_buffer_stats("test.a").requested == 4000);
  CHECK(view.sum().item<double>() == 10.0);
  view = torch::Tensor();
  const HostBufferStats s = host_buffer_stats("test.a");
  CHECK(s.buffers == 0);
  CHECK(s.requested == 0);
  CHECK(s.held == 0);
  CHECK(s.peak_requested == 4006);  // the peak stays until reset
  reset_host_buffer_peaks();
  CHECK(host_buffer_stats("test.a").peak_requested == 0);
  CHECK(host_buffer_stats().requested == all0.requested);
}

TEST_CASE("host_buffer pins its memory where a GPU is visible, at its exact size", "[cuda][core][host_buffers]") {
  if (testing::no_cuda()) return;
  // Made before any CUDA tensor: host_buffer initializes CUDA itself (LibTorch 2.x answers
  // is_pinned() false until then).
  torch::Tensor b = host_buffer(3, torch::kBFloat16, /*pinned=*/true, "test.pinned");
  CHECK(b.is_pinned() == compat::kPinnedHostAlloc);
  CHECK(host_buffer_stats("test.pinned").requested == 6);
  b.fill_(1.5);
  const torch::Tensor on_gpu = b.to(torch::kCUDA, /*non_blocking=*/true);
  CHECK(on_gpu.cpu().to(torch::kFloat).sum().item<double>() == 4.5);
}
