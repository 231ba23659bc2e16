#include "volt/strategies/cuda_graphs/graph_recorder.h"

#include "volt/core/compat.h"

namespace volt::detail {

namespace {

class CudaGraphWork : public RecordedWork {
 public:
  CudaGraphWork(const at::Device& device, const CudaGraphWork* share)
      : graph_(device, share != nullptr ? &share->graph_ : nullptr) {}
  void capture(const std::function<void()>& fn) { graph_.capture(fn); }
  void replay() override { graph_.replay(); }

 private:
  compat::CudaGraph graph_;
};

// [Note: the fit's stream with CUDA graphs]
// A captured backward must not touch the legacy default stream. Autograd runs each node on the
// stream that was current when the node was made, and hands a gradient from its producer's stream
// to its consumer's with an event. The AccumulateGrad nodes DDP holds from set-up (its bucket
// hooks, core/grad_hooks.h) keep the stream of set-up, the default one: a backward captured on a
// side stream then made the default stream wait on the capturing stream, which CUDA refuses
// ("operation would make the legacy stream depend on a capturing blocking stream", measured with
// LibTorch 2.11 on an H200, DDP at world size 1). PyTorch asks users of make_graphed_callables to
// construct DDP under a side stream for the same reason. So the CUDA recorder makes one side
// stream current for as long as graphs are on: it exists from the strategy's set-up, before DDP
// makes its accumulators, to teardown. Warm-up and capture run on that stream too, so producers
// and accumulators share it and nothing crosses streams inside a capture.
class CudaGraphRecorder : public GraphRecorder {
 public:
  explicit CudaGraphRecorder(const at::Device& device) : stream_(device), device_(device) {}
  // On the side stream, current while this recorder exists, as the captures that follow.
  void warm_up(const std::function<void()>& fn) override { fn(); }
  std::unique_ptr<RecordedWork> record(const std::function<void()>& fn, RecordedWork* share_pool_with) override {
    auto* share = dynamic_cast<CudaGraphWork*>(share_pool_with);
    TORCH_CHECK(share_pool_with == nullptr || share != nullptr, "a CUDA graph can share the pool of a CUDA graph only");
    auto work = std::make_unique<CudaGraphWork>(device_, share);
    work->capture(fn);
    return work;
  }
  const char* kind() const override { return "cuda graph"; }

 private:
  compat::SideStreamScope stream_;  // first: made before, and gone after, everything run on it
  at::Device device_;
};

class RerunWork : public RecordedWork {
 public:
  explicit RerunWork(std::function<void()> fn) : fn_(std::move(fn)) {}
  void replay() override { fn_(); }

 private:
  std::function<void()> fn_;
};

class RerunRecorder : public GraphRecorder {
 public:
  void warm_up(const std::function<void()>& fn) override { fn(); }
  std::unique_ptr<RecordedWork> record(const std::function<void()>& fn, RecordedWork*) override {
    fn();
    return std::make_unique<RerunWork>(fn);
  }
  const char* kind() const override { return "rerun"; }
};

}  // namespace

std::unique_ptr<GraphRecorder> make_graph_recorder(const at::Device& device) {
  if (device.is_cpu()) return make_rerun_recorder();
  return std::make_unique<CudaGraphRecorder>(device);
}

std::unique_ptr<GraphRecorder> make_rerun_recorder() { return std::make_unique<RerunRecorder>(); }

}  // namespace volt::detail
