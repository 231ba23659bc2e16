#include "volt/core/host_buffers.h"

#include <torch/torch.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <mutex>

#include "volt/core/compat.h"

#ifdef VOLT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace volt {

namespace {
struct Account {
  std::mutex mu;
  std::map<std::string, HostBufferStats> kinds;  // "" = all kinds
};
Account& account() {
  static auto* a = new Account;  // never destroyed: buffers may be freed during static destruction
  return *a;
}

void add(HostBufferStats& s, int64_t sign, int64_t requested, int64_t held) {
  s.buffers += sign;
  s.requested += sign * requested;
  s.held += sign * held;
  s.peak_requested = std::max(s.peak_requested, s.requested);
  s.peak_held = std::max(s.peak_held, s.held);
}

void record(const std::string& kind, int64_t sign, int64_t requested, int64_t held) {
  Account& a = account();
  std::lock_guard<std::mutex> lock(a.mu);
  add(a.kinds[kind], sign, requested, held);
  add(a.kinds[""], sign, requested, held);
}

#ifdef VOLT_WITH_CUDA
void free_pinned(void* p) {
  // Errors are ignored: at process exit the CUDA runtime may already be gone with the memory.
  (void)cudaFreeHost(p);
}
#endif
}  // namespace

at::DataPtr compat::host_alloc_exact(size_t nbytes, bool pinned) {
#ifdef VOLT_WITH_CUDA
  // No visible GPU (none in the machine, or CUDA_VISIBLE_DEVICES empty): nothing to pin for, and
  // CUDA's initialization would throw; the memory is pageable, as the DataLoader's pin_memory.
  if (pinned && nbytes > 0 && torch::cuda::is_available()) {
    cuda_lazy_init();
    void* p = nullptr;
    const cudaError_t err = cudaHostAlloc(&p, nbytes, cudaHostAllocDefault);
    if (err != cudaSuccess) (void)cudaGetLastError();  // clear the sticky error state
    TORCH_CHECK(err == cudaSuccess, "volt: could not allocate ", nbytes,
                " bytes of pinned host memory: ", cudaGetErrorString(err),
                " (out of host memory: use more ranks or nodes, or turn cpu_offload off)");
    return at::DataPtr(p, p, &free_pinned, at::Device(at::kCPU));
  }
#endif
  (void)pinned;
  return c10::GetAllocator(c10::DeviceType::CPU)->allocate(nbytes);
}

int64_t host_pages_bytes(int64_t nbytes) {
  static const int64_t page = std::max<long>(::sysconf(_SC_PAGESIZE), 1);
  return (nbytes + page - 1) / page * page;
}

at::Tensor host_buffer(int64_t numel, at::ScalarType dtype, bool pinned, const std::string& kind) {
  TORCH_CHECK(numel >= 0, "host_buffer: negative size ", numel);
  const int64_t requested = numel * static_cast<int64_t>(c10::elementSize(dtype));
  const int64_t held = host_pages_bytes(requested);
  if (requested == 0) return torch::empty({numel}, torch::TensorOptions().dtype(dtype));
  auto data = std::make_shared<at::DataPtr>(compat::host_alloc_exact(static_cast<size_t>(requested), pinned));
  void* p = data->get();
  record(kind, +1, requested, held);
  // The deleter owns the allocation: it un-counts the buffer and frees it when the storage goes.
  auto release = [data, kind, requested, held](void*) mutable {
    record(kind, -1, requested, held);
    data.reset();
  };
  return torch::from_blob(p, {numel}, release, torch::TensorOptions().dtype(dtype).device(torch::kCPU));
}

HostBufferStats host_buffer_stats(const std::string& kind) {
  Account& a = account();
  std::lock_guard<std::mutex> lock(a.mu);
  auto it = a.kinds.find(kind);
  return it == a.kinds.end() ? HostBufferStats{} : it->second;
}

void reset_host_buffer_peaks() {
  Account& a = account();
  std::lock_guard<std::mutex> lock(a.mu);
  for (auto& [k, s] : a.kinds) {
    s.peak_requested = s.requested;
    s.peak_held = s.held;
  }
}

}  // namespace volt
