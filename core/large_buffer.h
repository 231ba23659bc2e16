#pragma once
/// Host memory for large short-lived buffers (FSDP's gathered parameters, flattened gradients and
/// receive buffers, allocated and freed every step).
///
/// [Note: why not LibTorch's CPU allocator] A fresh 68 MB tensor from malloc is a new mapping of
/// 4 KiB pages: filling it took 24-28 ms here, 2 ms when the same memory was reused, because every
/// page faults. An FSDP step allocates about 4x the model's size in such buffers, so at 2 ranks on
/// the CPU the faults cost about as much as the communication. glibc's heap would reuse memory
/// (up to its 32 MB mmap threshold) but keeps it from the OS and fragments; a pool would hold idle
/// memory at the peak. This maps each buffer on its own, aligned to 2 MiB, and asks for
/// transparent huge pages (madvise MADV_HUGEPAGE): 34 faults instead of 17,000 for 68 MB (filling
/// it took 4-5 ms), and freed memory returns to the OS at once, so RSS follows live buffers.
/// Where the kernel has no huge pages the mapping works as ordinary pages.
///
/// Thread-safety: the functions are; each buffer is owned by the DataPtr or tensor returned.
#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>

#include <cstddef>

namespace volt::detail {

/// Buffers at least this large are mapped on their own; smaller ones come from LibTorch's allocator.
constexpr size_t kLargeBufferBytes = size_t{2} << 20;

/// `nbytes` of host memory (uninitialized) with its own deleter; CPU device. Throws c10::Error
/// (out of memory) when the mapping fails.
at::DataPtr allocate_large(size_t nbytes);

/// `nbytes` for a buffer on `device`: allocate_large for a large one on the CPU, the device's own
/// allocator otherwise (CUDA's caching allocator, LibTorch's CPU allocator).
at::DataPtr allocate_buffer(const at::Device& device, size_t nbytes);

/// An uninitialized contiguous tensor of `numel` elements: mapped by allocate_large for a large
/// one on the CPU, torch::empty otherwise.
at::Tensor empty_large(int64_t numel, const at::TensorOptions& options);

}  // namespace volt::detail
