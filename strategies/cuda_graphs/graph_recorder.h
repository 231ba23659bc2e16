#pragma once
/// How a graphed module call records its device work once and replays it: with CUDA graphs on a
/// GPU (compat::CudaGraph), or, on the CPU, by running the recorded function again. The second
/// replays nothing faster; it exists so that everything around the graph (static buffers, the
/// autograd node, the random-number and buffer bookkeeping, the checks) runs and is tested on a
/// machine without a GPU, against eager training, bit for bit.
///
/// Ownership: a RecordedWork owns what it recorded (a CUDA graph and its memory pool, or the
/// function). Thread-safety: one training thread.
#include <torch/types.h>

#include <functional>
#include <memory>

namespace volt::detail {

class RecordedWork {
 public:
  virtual ~RecordedWork() = default;
  /// Runs the recorded work again (queues it on the current stream, for a CUDA graph).
  virtual void replay() = 0;
};

class GraphRecorder {
 public:
  virtual ~GraphRecorder() = default;
  /// Runs warm-up iterations where a capture needs them (a side stream on CUDA).
  virtual void warm_up(const std::function<void()>& fn) = 0;
  /// Records `fn`. On CUDA its host code runs now and its kernels at each replay (not now); on the
  /// CPU it runs now and again at each replay, so `fn` must leave its results where the caller
  /// reads them in both cases. `share_pool_with`: a work recorded earlier by this recorder whose
  /// memory this one may reuse (replayed in capture order), or nullptr.
  virtual std::unique_ptr<RecordedWork> record(const std::function<void()>& fn, RecordedWork* share_pool_with) = 0;
  /// "cuda graph" or "rerun", for messages.
  virtual const char* kind() const = 0;
};

/// The recorder for `device`: CUDA graphs for a CUDA device (a CUDA build; throws otherwise), the
/// rerun recorder for the CPU. While the CUDA recorder exists, a side stream is the calling
/// thread's current stream on its device ([Note: the fit's stream with CUDA graphs]): make it before
/// anything that autograd should run on that stream, and destroy it on the same thread. The Trainer never graphs a CPU
/// run (Strategy refuses it); a strategy of a test that lifts that refusal trains through the rerun recorder.
std::unique_ptr<GraphRecorder> make_graph_recorder(const at::Device& device);
/// The CPU stand-in: replay() runs the recorded function again.
std::unique_ptr<GraphRecorder> make_rerun_recorder();

}  // namespace volt::detail
