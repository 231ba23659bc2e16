// compat::CudaGraph: at::cuda::CUDAGraph with the capture on a side stream (CUDA refuses to capture
// the legacy default stream), its memory pool shared on request, and a failed capture ended; and
// compat::SideStreamScope, which makes such a stream current for a whole fit.
#include <torch/torch.h>

#include "volt/core/compat.h"

#ifdef VOLT_WITH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#endif

namespace volt::compat {

#ifdef VOLT_WITH_CUDA

struct CudaGraph::Impl {
  at::Device device;
  const CudaGraph* share = nullptr;
  at::cuda::CUDAGraph graph;
  bool captured = false;
};

CudaGraph::CudaGraph(const at::Device& device, const CudaGraph* share_pool_with) {
  // Checked before Impl exists: at::cuda::CUDAGraph's constructor already asks CUDA for a stream.
  TORCH_CHECK(device.is_cuda(), "CUDA graphs record CUDA kernels; got a ", device, " device");
  TORCH_CHECK(share_pool_with == nullptr || share_pool_with->impl_->captured,
              "a CUDA graph can share the memory pool of a graph captured before it only");
  impl_.reset(new Impl{device, share_pool_with});
}

CudaGraph::~CudaGraph() = default;

struct SideStreamScope::Impl {
  c10::Stream previous;
  c10::Stream side;
};

SideStreamScope::SideStreamScope(const at::Device& device) {
  if (!device.is_cuda()) return;
  c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  const c10::Stream previous = impl.getStream(device);
  const c10::Stream side = impl.getStreamFromGlobalPool(device);
  c10::Event ready(c10::DeviceType::CUDA);
  ready.record(previous);
  ready.block(side);
  impl.exchangeStream(side);
  impl_.reset(new Impl{previous, side});
}

SideStreamScope::~SideStreamScope() {
  if (!impl_) return;
  c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  try {
    c10::Event done(c10::DeviceType::CUDA);
    done.record(impl_->side);
    done.block(impl_->previous);
  } catch (...) {  // a failed device (the error is reported where it happened): the stream is put back anyway
  }
  impl.exchangeStream(impl_->previous);
}

namespace {
/// The stream work for a capture goes to: the current one, unless that is the legacy default
/// stream, which CUDA cannot capture; then one from the pool.
c10::Stream capture_stream(const c10::impl::VirtualGuardImpl& impl, const at::Device& device) {
  const c10::Stream current = impl.getStream(device);
  return current == impl.getDefaultStream(device) ? impl.getStreamFromGlobalPool(device) : current;
}

/// Runs fn with `side` as the current stream of its device, ordered after `current`'s work so far;
/// `current` then waits for everything fn queued.
void on_stream(const c10::Stream& current, const c10::Stream& side, const std::function<void()>& fn) {
  if (side == current) {
    fn();
    return;
  }
  c10::Event ready(c10::DeviceType::CUDA);
  ready.record(current);
  ready.block(side);
  {
    c10::StreamGuard guard(side);
    fn();
  }
  c10::Event done(c10::DeviceType::CUDA);
  done.record(side);
  done.block(current);
}
}  // namespace

void CudaGraph::capture(const std::function<void()>& fn) {
  TORCH_CHECK(!impl_->captured, "this CUDA graph was captured already");
  c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  on_stream(impl.getStream(impl_->device), capture_stream(impl, impl_->device), [&] {
    if (impl_->share != nullptr)
      impl_->graph.capture_begin(impl_->share->impl_->graph.pool());
    else
      impl_->graph.capture_begin();
    try {
      fn();
    } catch (const std::exception& e) {
      // The stream stays in capture mode until the capture is ended, and nothing could run on it.
      try {
        impl_->graph.capture_end();
      } catch (...) {
      }
      TORCH_CHECK(false, "CUDA graph capture failed: ", e.what(),
                  " (a capture cannot contain host synchronizations such as .item(), .cpu(), nonzero() or shapes "
                  "that depend on values)");
    }
    impl_->graph.capture_end();
  });
  impl_->captured = true;
}

void CudaGraph::replay() {
  TORCH_CHECK(impl_->captured, "CUDA graph replayed before it was captured");
  impl_->graph.replay();
}

bool CudaGraph::captured() const { return impl_->captured; }

#else  // no CUDA in this build

struct CudaGraph::Impl {};
struct SideStreamScope::Impl {};

SideStreamScope::SideStreamScope(const at::Device&) {}
SideStreamScope::~SideStreamScope() = default;

CudaGraph::CudaGraph(const at::Device&, const CudaGraph*) {
  TORCH_CHECK(false, "CUDA graphs need a CUDA build of volt (this one is built for the CPU, with LibTorch ",
              TORCH_VERSION, ")");
}
CudaGraph::~CudaGraph() = default;
void CudaGraph::capture(const std::function<void()>&) {}
void CudaGraph::replay() {}
bool CudaGraph::captured() const { return false; }

#endif

}  // namespace volt::compat
