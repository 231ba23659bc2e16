#include "volt/data/worker_pool.h"

namespace volt::detail {

WorkerPool::WorkerPool(int64_t num_workers) {
  threads_.reserve(num_workers);
  try {
    for (int64_t w = 0; w < num_workers; ++w) threads_.emplace_back([this, w] { loop(w); });
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      shutdown_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
    throw;
  }
}

WorkerPool::~WorkerPool() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    stop_locked(lock);
    shutdown_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkerPool::stop_locked(std::unique_lock<std::mutex>& lock) {
  if (!job_) return;
  job_->cancel();
  idle_.wait(lock, [&] { return busy_ == 0; });
  job_.reset();
}

void WorkerPool::start(std::shared_ptr<WorkerJob> job) {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    stop_locked(lock);
    job_ = std::move(job);
    busy_ = num_workers();
    ++generation_;
  }
  wake_.notify_all();
}

void WorkerPool::stop(const WorkerJob* job) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (job_.get() == job) stop_locked(lock);
}

bool WorkerPool::is_current(const WorkerJob* job) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return job_.get() == job;
}

void WorkerPool::loop(int64_t worker) {
  uint64_t seen = 0;
  for (;;) {
    std::shared_ptr<WorkerJob> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return shutdown_ || generation_ != seen; });
      if (shutdown_) return;
      seen = generation_;
      job = job_;
    }
    job->work(worker);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --busy_;
    }
    idle_.notify_all();
  }
}

}  // namespace volt::detail
