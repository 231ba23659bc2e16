#pragma once
/// Long-lived host buffers of exact size, and an account of them: what was asked for against what
/// the allocations hold.
///
/// [Note: why exact sizes] FSDP's cpu_offload keeps every unit's fp32 shard and gradient shard in
/// pinned host memory. LibTorch's caching host allocator (pin_memory(), pinned_memory(true)) rounds
/// each block up to a power of two and keeps freed blocks cached, so a 240 MB shard holds 256 MB and
/// a 300 MB one 512 MB: on a model whose fp32 state barely fits in host memory that is the
/// difference between fitting and not. host_buffer() asks for exactly the bytes needed
/// (compat::host_alloc_exact: cudaHostAlloc in CUDA builds), and records each buffer by kind until
/// it is freed, so a run can report host bytes held per byte of state.
///
/// Thread-safety: every function is thread-safe; buffers may be freed on any thread.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace volt {

/// Live buffers of one kind (or of all kinds): bytes requested and bytes held, now and at the peak.
/// `held` is what the allocations occupy: the requested bytes rounded up to whole pages.
struct HostBufferStats {
  int64_t buffers = 0;
  int64_t requested = 0;
  int64_t held = 0;
  int64_t peak_requested = 0;
  int64_t peak_held = 0;
};

/// An uninitialized contiguous CPU tensor of `numel` elements of `dtype` in memory of exactly its
/// size, page-locked when `pinned`, the build has CUDA (compat::kPinnedHostAlloc) and a GPU is
/// visible (pageable otherwise), counted under
/// `kind` (e.g. "fsdp.shard") until its storage is freed. Throws c10::Error when out of memory.
at::Tensor host_buffer(int64_t numel, at::ScalarType dtype, bool pinned, const std::string& kind);

/// The live buffers of `kind`; "" for all kinds together.
HostBufferStats host_buffer_stats(const std::string& kind = "");

/// Starts the peaks again from the current values (every kind).
void reset_host_buffer_peaks();

/// The bytes an allocation of `nbytes` occupies: whole pages of this machine.
int64_t host_pages_bytes(int64_t nbytes);

}  // namespace volt
