#pragma once
/// volt's forward-interception mechanism. LibTorch's C++ modules have no forward hooks, so a module
/// that a strategy may act on (an FSDP unit, an activation-checkpointed block) derives from
/// HookedModule and routes its forward through `intercepted(...)`. With no interceptor installed,
/// `intercepted` calls the body directly: a plain forward, one std::function call of overhead.
///
/// Ownership: interceptors are shared_ptrs held by the module; strategies install them at set-up and
/// remove them at teardown. Thread-safety: installing/removing is not thread-safe; forward calls are
/// as thread-safe as the interceptors themselves (volt's are meant for one training thread).
#include <torch/nn/module.h>
#include <torch/types.h>

#include <functional>
#include <memory>
#include <vector>

namespace volt {

using TensorVec = std::vector<torch::Tensor>;
/// The body of a forward: takes the (possibly replaced) inputs, returns the output.
using ForwardFn = std::function<torch::Tensor(const TensorVec&)>;

/// Acts around the forward of one module: may run code before and after, replace the inputs, or
/// call `next` in a special way (activation checkpointing calls it twice: once without a graph in
/// forward, once again in backward).
class ForwardInterceptor {
 public:
  virtual ~ForwardInterceptor() = default;
  virtual torch::Tensor around(torch::nn::Module& module, const TensorVec& inputs, const ForwardFn& next) = 0;
  /// A short name for summaries and errors ("fsdp", "activation_checkpoint").
  virtual const char* name() const = 0;
};

class HookedModule : public torch::nn::Module {
 public:
  using torch::nn::Module::Module;

  /// Interceptors run outermost-first in the order given by their priority (lower = outer).
  /// FSDP uses 0 (gather outside), activation checkpointing 10 (recompute inside the gather).
  void add_interceptor(std::shared_ptr<ForwardInterceptor> interceptor, int priority = 0);
  /// Removes every interceptor with this name; returns how many were removed.
  size_t remove_interceptors(const std::string& name);
  bool has_interceptor(const std::string& name) const;
  size_t num_interceptors() const { return interceptors_.size(); }

  /// Whether the backward of this module's forward reads the module's own parameters. True unless
  /// a subclass knows better: an embedding's gradient needs only the indices (volt::Hooked says so
  /// for torch::nn::Embedding). FSDP does not gather a unit again for its backward when false
  /// (unless it is also activation-checkpointed: the recomputed forward reads the weights).
  virtual bool backward_reads_parameters() const { return true; }

 protected:
  /// Runs `body(inputs)` through the installed interceptors. Call from forward():
  ///   return intercepted({x, mask}, [this](const TensorVec& in) { return body(in[0], in[1]); });
  /// The body may be called again later (activation checkpointing recomputes it in backward): it
  /// must take its tensors from `in` and capture nothing by reference but `this`.
  torch::Tensor intercepted(TensorVec inputs, const ForwardFn& body);

 private:
  struct Entry {
    int priority;
    std::shared_ptr<ForwardInterceptor> interceptor;
  };
  std::vector<Entry> interceptors_;
};

/// True when `m` is a HookedModule (strategies can act on its forward).
inline bool is_hooked(const torch::nn::Module& m) { return dynamic_cast<const HookedModule*>(&m) != nullptr; }

}  // namespace volt
