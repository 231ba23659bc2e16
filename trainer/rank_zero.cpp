#include "volt/trainer/rank_zero.h"

#include <exception>

#include "volt/core/errors.h"

namespace volt::detail {

void run_on_global_zero(Strategy& strategy, const std::function<void()>& fn, const std::string& what) {
  std::string error;
  std::exception_ptr original;
  if (strategy.is_global_zero()) {
    try {
      fn();
    } catch (const std::exception& e) {
      error = e.what();
      original = std::current_exception();
    }
  }
  // The other ranks wait for rank 0's files; a failure there fails every rank with its message
  // (rank 0 with its own error, of its own type).
  try {
    agree_or_throw(strategy, error, what);
  } catch (const CheckpointError& e) {
    if (original) std::rethrow_exception(original);
    throw DataError(e.what());
  }
}

}  // namespace volt::detail
