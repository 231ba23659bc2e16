#pragma once
/// The one place that branches on the LibTorch version (Debian's 1.13 on the CPU machines, the
/// PyTorch 2.x wheel's LibTorch on the GPU machine). Everything else calls these helpers.
#include <ATen/autocast_mode.h>
#include <c10/core/Allocator.h>
#include <c10/core/StorageImpl.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <functional>
#include <memory>

#define VOLT_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace volt::compat {

/// Whether CPU kernels exist for fp16 matmuls (LibTorch 1.13 has none: "addmm_impl_cpu_" not
/// implemented for 'Half').
inline constexpr bool kCpuHalfMatmul = VOLT_TORCH_AT_LEAST(2, 0);

/// Releases a tensor's storage memory (nbytes -> 0) while every tensor sharing that storage keeps
/// its sizes; `refill_storage` gives it memory again. Used by FSDP to really free unsharded
/// parameters even while the autograd graph still references them.
inline void free_storage(const at::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  if (s->nbytes() == 0) return;
  s->set_data_ptr_noswap(at::DataPtr(nullptr, s->device()));
  s->set_nbytes(0);
}
inline void refill_storage(const at::Tensor& t, size_t nbytes) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  if (s->nbytes() == nbytes) return;
  c10::Allocator* alloc = s->allocator();
  if (alloc == nullptr) alloc = c10::GetAllocator(s->device_type());
  s->set_data_ptr_noswap(alloc->allocate(nbytes));
  s->set_nbytes(nbytes);
}
/// As refill_storage, with memory the caller allocated (core/large_buffer.h).
inline void refill_storage(const at::Tensor& t, at::DataPtr data, size_t nbytes) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(std::move(data));
  s->set_nbytes(nbytes);
}
inline size_t storage_nbytes(const at::Tensor& t) { return t.storage().nbytes(); }

/// CPU autocast (bf16-mixed on the CPU).
inline void set_cpu_autocast(bool enabled, at::ScalarType dtype) {
#if VOLT_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(at::kCPU, enabled);
  at::autocast::set_autocast_dtype(at::kCPU, dtype);
#else
  at::autocast::set_cpu_enabled(enabled);
  at::autocast::set_autocast_cpu_dtype(dtype);
#endif
}
inline bool cpu_autocast_enabled() {
#if VOLT_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(at::kCPU);
#else
  return at::autocast::is_cpu_enabled();
#endif
}
inline void set_cuda_autocast(bool enabled, at::ScalarType dtype) {
#if VOLT_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(at::kCUDA, enabled);
  at::autocast::set_autocast_dtype(at::kCUDA, dtype);
#else
  at::autocast::set_enabled(enabled);
  at::autocast::set_autocast_gpu_dtype(dtype);
#endif
}
inline void clear_autocast_cache() { at::autocast::clear_cache(); }

/// Fused attention (flash / memory-efficient kernels) where this LibTorch has it (2.0+).
#if VOLT_TORCH_AT_LEAST(2, 0)
#define VOLT_HAVE_SDPA 1
inline at::Tensor scaled_dot_product_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                               const at::Tensor& additive_mask, double dropout_p) {
  // The mask must be bool or of the query's dtype (bf16 under autocast); none at all when undefined.
  c10::optional<at::Tensor> m;
  if (additive_mask.defined()) m = additive_mask.to(q.scalar_type());
  return at::scaled_dot_product_attention(q, k, v, m, dropout_p, /*is_causal=*/false);
}
/// Causal attention with the kernels' own mask (flash attention's is_causal: no mask tensor). q is
/// [B, H, T, hd], k and v [B, KV, S, hd] with KV dividing H: query head j reads kv head j / (H / KV)
/// (grouped-query attention). Where a fused kernel takes grouped heads (LibTorch 2.5+'s enable_gqa:
/// flash attention, and others in newer versions), k and v are passed as they are; otherwise
/// (float32, older GPUs, LibTorch before 2.5) they are repeated to H heads first, which the fused
/// kernels for equal heads take: SDPA's math fallback for grouped heads keeps the whole [T, S] scores.
inline at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout_p) {
  const int64_t heads = q.size(-3), kv_heads = k.size(-3);
  TORCH_CHECK(kv_heads > 0 && heads % kv_heads == 0, "causal_attention: ", kv_heads, " kv heads do not divide ", heads,
              " query heads");
  if (kv_heads == heads) return at::scaled_dot_product_attention(q, k, v, c10::nullopt, dropout_p, /*is_causal=*/true);
#if VOLT_TORCH_AT_LEAST(2, 5)
  const int64_t backend = at::_fused_sdp_choice(q, k, v, c10::nullopt, dropout_p, /*is_causal=*/true,
                                                /*scale=*/c10::nullopt, /*enable_gqa=*/true);
  // sdp::SDPBackend: -1 error, 0 math, then the fused kernels (flash 1, efficient 2, cuDNN 3, ...).
  if (backend > 0)
    return at::scaled_dot_product_attention(q, k, v, c10::nullopt, dropout_p, /*is_causal=*/true,
                                            /*scale=*/c10::nullopt, /*enable_gqa=*/true);
#endif
  const int64_t n_rep = heads / kv_heads;
  return at::scaled_dot_product_attention(q, k.repeat_interleave(n_rep, -3), v.repeat_interleave(n_rep, -3),
                                          c10::nullopt, dropout_p, /*is_causal=*/true);
}
#else
#define VOLT_HAVE_SDPA 0
#endif

/// Whether at::rms_norm exists (LibTorch 2.4+; one fused CUDA kernel for forward and one for
/// backward in the versions that have at::_fused_rms_norm, the elementwise ops before).
inline constexpr bool kRmsNormOp = VOLT_TORCH_AT_LEAST(2, 4);
/// x / sqrt(mean(x^2 over the last dimension) + eps) * weight, computed in fp32 and returned in x's
/// dtype, as Hugging Face's LlamaRMSNorm computes it when weight has x's dtype (the caller checks).
/// Autocast is bypassed: it would run the op in fp32 and return fp32, while the kernel computes in
/// fp32 anyway. Without kRmsNormOp this throws.
inline at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
#if VOLT_TORCH_AT_LEAST(2, 4)
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  return at::rms_norm(x, {x.size(-1)}, weight, eps);
#else
  TORCH_CHECK(false, "at::rms_norm needs LibTorch 2.4 or newer (this is ", TORCH_VERSION, ")");
  return x;
#endif
}

/// Autocast settings of this thread, captured at one point and re-applied at another (activation
/// checkpointing recomputes a forward inside backward, where autocast is off).
struct AutocastState {
  bool cpu = false, cuda = false;
  at::ScalarType cpu_dtype = at::kBFloat16, cuda_dtype = at::kHalf;
  static AutocastState capture() {
    AutocastState s;
#if VOLT_TORCH_AT_LEAST(2, 4)
    s.cpu = at::autocast::is_autocast_enabled(at::kCPU);
    s.cuda = at::autocast::is_autocast_enabled(at::kCUDA);
    s.cpu_dtype = at::autocast::get_autocast_dtype(at::kCPU);
    s.cuda_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
#else
    s.cpu = at::autocast::is_cpu_enabled();
    s.cuda = at::autocast::is_enabled();
    s.cpu_dtype = at::autocast::get_autocast_cpu_dtype();
    s.cuda_dtype = at::autocast::get_autocast_gpu_dtype();
#endif
    return s;
  }
  void apply() const {
    set_cpu_autocast(cpu, cpu_dtype);
    set_cuda_autocast(cuda, cuda_dtype);
  }
};

}  // namespace volt::compat

namespace volt::compat {
/// The key torch::optim optimizers use for a parameter's state: a string of the TensorImpl's
/// address in 1.x, the address itself in 2.x.
#if VOLT_TORCH_AT_LEAST(2, 0)
inline void* optimizer_state_key(const at::Tensor& p) { return p.unsafeGetTensorImpl(); }
#else
inline std::string optimizer_state_key(const at::Tensor& p) { return c10::guts::to_string(p.unsafeGetTensorImpl()); }
#endif
}  // namespace volt::compat

#if VOLT_TORCH_AT_LEAST(2, 0)
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif
namespace volt::compat {
/// The c10d object volt runs collectives on: a ProcessGroup in 1.x, a Backend in 2.x. Both expose
/// the same collective methods.
#if VOLT_TORCH_AT_LEAST(2, 0)
using C10dBackend = c10d::Backend;
#else
using C10dBackend = c10d::ProcessGroup;
#endif
}  // namespace volt::compat

#include <torch/csrc/distributed/c10d/TCPStore.hpp>
namespace volt::compat {
/// A c10d::TCPStore with `opts`. LibTorch 2.4+ asks for its libuv server by default, which a
/// LibTorch built without libuv (Debian's 2.6) refuses before it opens any socket ("use_libuv was
/// requested but PyTorch was build without libuv support"): the store then takes the classic
/// server, as Python's USE_LIBUV=0 does. Clients speak the same protocol to either server.
inline c10::intrusive_ptr<c10d::TCPStore> make_tcp_store(const std::string& host, c10d::TCPStoreOptions opts) {
#if VOLT_TORCH_AT_LEAST(2, 4)
  if (opts.useLibUV) {
    try {
      return c10::make_intrusive<c10d::TCPStore>(host, opts);
    } catch (const c10::Error& e) {
      if (std::string(e.what()).find("without libuv") == std::string::npos) throw;
      opts.useLibUV = false;
    }
  }
#endif
  return c10::make_intrusive<c10d::TCPStore>(host, opts);
}
}  // namespace volt::compat

#ifdef VOLT_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif
namespace volt::compat {
/// Makes `device` this thread's current CUDA device (LibTorch's torch.cuda.set_device); nothing
/// without CUDA or without that GPU visible.
inline void set_cuda_device(int64_t device) {
#ifdef VOLT_WITH_CUDA
  if (device < c10::cuda::device_count()) c10::cuda::set_device(static_cast<c10::DeviceIndex>(device));
#else
  (void)device;
#endif
}
/// Peak bytes the CUDA caching allocator handed out on `device` since the last reset (0 without CUDA
/// or without that GPU visible).
inline int64_t cuda_peak_allocated(int device = 0) {
#ifdef VOLT_WITH_CUDA
  if (device >= c10::cuda::device_count()) return 0;  // no such GPU visible: nothing allocated
  auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  return stats.allocated_bytes[0].peak;  // [0]: StatType::AGGREGATE
#else
  return 0;
#endif
}
inline int64_t cuda_peak_reserved(int device = 0) {
#ifdef VOLT_WITH_CUDA
  if (device >= c10::cuda::device_count()) return 0;
  auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  return stats.reserved_bytes[0].peak;
#else
  return 0;
#endif
}
/// The CUDA caching allocator's bytes on `device`: allocated and reserved, now and at the peak
/// (zeros without CUDA).
struct CudaMemoryStats {
  int64_t allocated = 0, allocated_peak = 0, reserved = 0, reserved_peak = 0;
};
inline CudaMemoryStats cuda_memory_stats(int device = 0) {
  CudaMemoryStats m;
#ifdef VOLT_WITH_CUDA
  if (device >= c10::cuda::device_count()) return m;
  auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  m.allocated = stats.allocated_bytes[0].current;  // [0]: StatType::AGGREGATE
  m.allocated_peak = stats.allocated_bytes[0].peak;
  m.reserved = stats.reserved_bytes[0].current;
  m.reserved_peak = stats.reserved_bytes[0].peak;
#endif
  return m;
}
inline void cuda_reset_peak(int device = 0) {
#ifdef VOLT_WITH_CUDA
  if (device >= c10::cuda::device_count()) return;
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device));
#endif
}
/// Initializes LibTorch's CUDA state (what the first CUDA tensor would), once; nothing without CUDA.
/// Memory volt pins itself (cudaHostAlloc) before any CUDA tensor exists would otherwise report
/// is_pinned() == false: LibTorch 2.x answers false for every pointer until CUDA is initialized.
inline void cuda_lazy_init() {
#ifdef VOLT_WITH_CUDA
#if VOLT_TORCH_AT_LEAST(2, 6)
  at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
#else
  at::globalContext().lazyInitCUDA();
#endif
#endif
}
}  // namespace volt::compat

namespace volt::compat {
/// PyTorch's fused multi-tensor Adam/AdamW kernels (at::_fused_adam_ / at::_fused_adamw_: one pass
/// over each parameter, a few launches for all of them): for CUDA tensors since 2.1, for CPU tensors
/// since 2.4. LibTorch 1.13 has neither; there the host step is volt's own kernel
/// (optim/fused_adam.h) and CUDA parameters take torch::optim's step.
inline constexpr bool kFusedAdamCuda = VOLT_TORCH_AT_LEAST(2, 1);
inline constexpr bool kFusedAdamCpu = VOLT_TORCH_AT_LEAST(2, 4);
/// Whether fused_adam_ can step tensors on `device` with this LibTorch.
inline bool fused_adam_available(const at::Device& device) {
  return device.is_cuda() ? kFusedAdamCuda : device.is_cpu() && kFusedAdamCpu;
}
/// One Adam (`decoupled` false: L2 weight decay) or AdamW (`decoupled` true) step of PyTorch's fused
/// kernel over lists of tensors of one device and dtype. `steps`: one float32 tensor per parameter,
/// on its device, holding the step number this update is (already incremented). `max_exp_avg_sqs`
/// is empty unless `amsgrad`. Throws c10::Error where fused_adam_available is false.
inline void fused_adam_(bool decoupled, at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                        at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs, at::TensorList steps, double lr,
                        double beta1, double beta2, double weight_decay, double eps, bool amsgrad) {
#if VOLT_TORCH_AT_LEAST(2, 1)
  TORCH_CHECK(params.empty() || fused_adam_available(params[0].device()), "fused Adam: no fused kernel for ",
              params[0].device(), " tensors in this LibTorch");
  if (decoupled)
    at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, lr, beta1, beta2, weight_decay, eps,
                      amsgrad, /*maximize=*/false);
  else
    at::_fused_adam_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, lr, beta1, beta2, weight_decay, eps,
                     amsgrad, /*maximize=*/false);
#else
  TORCH_CHECK(false, "fused Adam: PyTorch's fused kernels need LibTorch 2.1 or newer (this is ", TORCH_VERSION, ")");
#endif
}
}  // namespace volt::compat

#ifdef VOLT_WITH_CUDA
#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#endif
namespace volt::compat {
/// Whether host_alloc_exact can give page-locked memory (CUDA builds).
#ifdef VOLT_WITH_CUDA
inline constexpr bool kPinnedHostAlloc = true;
#else
inline constexpr bool kPinnedHostAlloc = false;
#endif
/// `nbytes` of host memory of exactly that size, uninitialized, freed when the DataPtr goes.
/// `pinned` (CUDA builds only): page-locked with cudaHostAlloc, where LibTorch's caching host
/// allocator (pin_memory(), pinned_memory(true)) would round the block up to a power of two and keep
/// it cached. Otherwise LibTorch's CPU allocator. Throws c10::Error when out of memory. Defined in
/// core/host_buffers.cpp.
at::DataPtr host_alloc_exact(size_t nbytes, bool pinned);

/// A point in the work queued on a device's current stream, which another thread can wait for
/// (offloaded gradients copied to the host asynchronously, read by a host thread). For the CPU both
/// calls do nothing: its work is done when it is queued.
class DeviceMark {
 public:
  /// Marks the work queued so far on the current stream of `device` (the calling thread's).
  void record(const at::Device& device) {
#ifdef VOLT_WITH_CUDA
    if (!device.is_cuda()) return;
    c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
    event_ = std::make_shared<c10::Event>(c10::DeviceType::CUDA);
    event_->record(impl.getStream(device));
#endif
  }
  /// Blocks the calling thread until the marked work has run.
  void wait() const {
#ifdef VOLT_WITH_CUDA
    if (event_) event_->synchronize();
#endif
  }

 private:
#ifdef VOLT_WITH_CUDA
  std::shared_ptr<c10::Event> event_;
#endif
};
}  // namespace volt::compat

namespace volt::compat {
/// Whether this build can capture CUDA graphs (CUDA builds: at::cuda::CUDAGraph, the same API in
/// LibTorch 1.13 and 2.x).
#ifdef VOLT_WITH_CUDA
inline constexpr bool kCudaGraphs = true;
#else
inline constexpr bool kCudaGraphs = false;
#endif

/// While it lives, a stream from `device`'s pool is the calling thread's current stream on that
/// device, ordered after the work queued before; when it goes, the previous stream is current again
/// and waits for everything queued meanwhile. Nothing for a CPU device or in a build without CUDA.
/// Used by trainer.cuda_graph: see [Note: the fit's stream with CUDA graphs] in
/// strategies/cuda_graphs/graph_recorder.cpp. Defined in core/cuda_graph.cpp. Thread-safety:
/// destroy it on the thread that made it.
class SideStreamScope {
 public:
  explicit SideStreamScope(const at::Device& device);
  ~SideStreamScope();
  SideStreamScope(const SideStreamScope&) = delete;
  SideStreamScope& operator=(const SideStreamScope&) = delete;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// A CUDA graph: the kernels a function queues on one device, recorded once and replayed with one
/// launch. Defined in core/cuda_graph.cpp; in a build without CUDA the constructor throws.
///
/// Ownership: the graph owns its private memory pool (shared with `share_pool_with`'s when given:
/// safe only when the graphs are replayed in the order they were captured). Thread-safety: one
/// thread; the caller keeps every tensor the graph reads or writes alive as long as the graph.
class CudaGraph {
 public:
  /// `share_pool_with` must outlive this graph.
  explicit CudaGraph(const at::Device& device, const CudaGraph* share_pool_with = nullptr);
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  /// Records the device work `fn` queues: its host code runs once, now; its kernels run at each
  /// replay(), not now. A host synchronization inside `fn` (.item(), a data-dependent shape) makes
  /// the capture fail: the error is rethrown as a c10::Error saying so, with the capture ended.
  /// CUDA cannot capture the legacy default stream: the capture runs on the current stream when
  /// that is another one (a SideStreamScope), else on a pool stream ordered after the work queued so
  /// far and before what comes next.
  void capture(const std::function<void()>& fn);
  /// Queues the recorded kernels on the current stream.
  void replay();
  bool captured() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};
}  // namespace volt::compat

namespace volt::compat {
/// Elementwise CUDA kernels compiled at run time by NVRTC through ATen's jiterator (the mechanism
/// behind torch.cuda.jiterator): CUDA builds of LibTorch 2.1 or newer whose jiterator header
/// compiles with volt's call (VOLT_JITERATOR: CMakeLists.txt probes it).
#if defined(VOLT_WITH_CUDA) && defined(VOLT_JITERATOR) && VOLT_TORCH_AT_LEAST(2, 1)
#define VOLT_HAVE_JITERATOR 1
#else
#define VOLT_HAVE_JITERATOR 0
#endif
inline constexpr bool kJitElementwise = VOLT_HAVE_JITERATOR;

/// Runs `code`, the source of a function template `name` over one type T, elementwise over
/// `inputs` (CUDA tensors that broadcast together, promoted to their common dtype) and returns
/// `num_outputs` new tensors of that dtype. T is the common dtype's math type (float for bf16, fp16
/// and fp32): `T name(T a, T b)` for one output, `void name(T a, T b, T& out0, T& out1)` for more.
/// Compiled at its first call for each dtype and device, then cached by ATen (NVRTC; on disk under
/// ~/.cache/torch/kernels unless USE_PYTORCH_KERNEL_CACHE=0). Throws a c10::Error when the kernel
/// cannot be compiled or launched, and always where kJitElementwise is false. Defined in
/// core/jit_elementwise.cpp. Thread-safe (ATen locks its kernel cache).
std::vector<at::Tensor> jit_elementwise(const std::string& code, const std::string& name, int num_outputs,
                                        const std::vector<at::Tensor>& inputs);
}  // namespace volt::compat
