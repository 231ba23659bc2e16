#include "volt/core/hooked_module.h"

#include <algorithm>

namespace volt {

void HookedModule::add_interceptor(std::shared_ptr<ForwardInterceptor> interceptor, int priority) {
  auto pos = std::upper_bound(interceptors_.begin(), interceptors_.end(), priority,
                              [](int p, const Entry& e) { return p < e.priority; });
  interceptors_.insert(pos, Entry{priority, std::move(interceptor)});
}

size_t HookedModule::remove_interceptors(const std::string& name) {
  size_t before = interceptors_.size();
  interceptors_.erase(std::remove_if(interceptors_.begin(), interceptors_.end(),
                                     [&](const Entry& e) { return name == e.interceptor->name(); }),
                      interceptors_.end());
  return before - interceptors_.size();
}

bool HookedModule::has_interceptor(const std::string& name) const {
  return std::any_of(interceptors_.begin(), interceptors_.end(),
                     [&](const Entry& e) { return name == e.interceptor->name(); });
}

torch::Tensor HookedModule::intercepted(TensorVec inputs, const ForwardFn& body) {
  if (interceptors_.empty()) return body(inputs);
  // Build the chain from the innermost out. Every level owns copies of what it needs, so `next`
  // stays callable after this forward returns (activation checkpointing calls it in backward).
  ForwardFn next = body;
  for (auto it = interceptors_.rbegin(); it != interceptors_.rend(); ++it) {
    next = [ic = it->interceptor, self = this, inner = std::move(next)](const TensorVec& x) {
      return ic->around(*self, x, inner);
    };
  }
  return next(inputs);
}

}  // namespace volt
