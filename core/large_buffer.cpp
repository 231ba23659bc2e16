#include "volt/core/large_buffer.h"

#include <sys/mman.h>
#include <torch/torch.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace volt::detail {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kPage = 4096;

struct Mapping {
  void* base;
  size_t length;
};

void unmap(void* ctx) {
  auto* m = static_cast<Mapping*>(ctx);
  ::munmap(m->base, m->length);
  delete m;
}

}  // namespace

at::DataPtr allocate_large(size_t nbytes) {
  const size_t length = (std::max<size_t>(nbytes, 1) + kPage - 1) / kPage * kPage;
  // Map one huge page more than needed and cut off both ends, so the buffer starts on a 2 MiB
  // boundary (the kernel backs only aligned 2 MiB ranges with huge pages).
  const size_t mapped = length + kHugePage;
  void* raw = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  TORCH_CHECK(raw != MAP_FAILED, "volt: could not map ", nbytes, " bytes of host memory: ", std::strerror(errno),
              " (out of memory: use more ranks, activation checkpointing or a smaller batch)");
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > start) ::munmap(raw, aligned - start);
  const std::uintptr_t end = start + mapped, used_end = aligned + length;
  if (end > used_end) ::munmap(reinterpret_cast<void*>(used_end), end - used_end);
  void* p = reinterpret_cast<void*>(aligned);
#ifdef MADV_HUGEPAGE
  ::madvise(p, length, MADV_HUGEPAGE);  // advice only: without THP the pages are ordinary ones
#endif
  return at::DataPtr(p, new Mapping{p, length}, &unmap, at::Device(at::kCPU));
}

namespace {
bool mapped_on_its_own(const at::Device& device, size_t nbytes) {
  return device.type() == at::kCPU && nbytes >= kLargeBufferBytes;
}
}  // namespace

at::DataPtr allocate_buffer(const at::Device& device, size_t nbytes) {
  return mapped_on_its_own(device, nbytes) ? allocate_large(nbytes)
                                           : c10::GetAllocator(device.type())->allocate(nbytes);
}

at::Tensor empty_large(int64_t numel, const at::TensorOptions& options) {
  TORCH_CHECK(numel >= 0, "volt: a buffer of ", numel, " elements was asked for");
  const size_t nbytes = static_cast<size_t>(numel) * c10::elementSize(c10::typeMetaToScalarType(options.dtype()));
  if (!mapped_on_its_own(options.device(), nbytes) || options.pinned_memory()) return torch::empty({numel}, options);
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, allocate_large(nbytes), nullptr, false);
  return at::empty({0}, options).set_(std::move(storage), 0, {numel}, {1});
}

}  // namespace volt::detail
