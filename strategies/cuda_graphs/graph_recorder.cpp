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

class CudaGraphRecorder : public GraphRecorder {
 public:
  explicit CudaGraphRecorder(const at::Device& device) : device_(device), side_(device) {}
  void warm_up(const std::function<void()>& fn) override { side_.run_on_side_stream(fn); }
  std::unique_ptr<RecordedWork> record(const std::function<void()>& fn, RecordedWork* share_pool_with) override {
    auto* share = dynamic_cast<CudaGraphWork*>(share_pool_with);
    TORCH_CHECK(share_pool_with == nullptr || share != nullptr, "a CUDA graph can share the pool of a CUDA graph only");
    auto work = std::make_unique<CudaGraphWork>(device_, share);
    work->capture(fn);
    return work;
  }
  const char* kind() const override { return "cuda graph"; }

 private:
  at::Device device_;
  compat::CudaGraph side_;  // never captured: lends its device's side stream to warm_up
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
