#include "volt/core/host_parallel.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace volt::detail {

int host_threads() { return std::max(1, at::get_num_threads()); }

void host_parallel_for(int64_t n, int64_t grain, int threads, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(std::max(threads, 1), n / grain));
  if (chunks == 1) {
    fn(0, n);
    return;
  }
  std::mutex mu;
  std::exception_ptr first;
  auto run = [&](int64_t c) {
    const int64_t b = n / chunks * c + std::min(c, n % chunks);  // the first n % chunks are one longer
    const int64_t e = b + n / chunks + (c < n % chunks ? 1 : 0);
    try {
      fn(b, e);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!first) first = std::current_exception();
    }
  };
  std::vector<std::thread> workers;
  std::vector<int64_t> left;  // chunks no thread could be started for
  // Reserved first, so that nothing below throws while a started thread is still joinable (its
  // destructor would end the process).
  workers.reserve(static_cast<size_t>(chunks - 1));
  left.reserve(static_cast<size_t>(chunks - 1));
  for (int64_t c = 1; c < chunks; ++c) {
    try {
      workers.emplace_back(run, c);
    } catch (...) {  // std::system_error from pthread_create, std::bad_alloc for the thread's state
      left.push_back(c);
    }
  }
  run(0);
  for (int64_t c : left) run(c);
  for (auto& w : workers) w.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace volt::detail
