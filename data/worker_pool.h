#pragma once
/// Worker threads of a DataLoader (internal). A pool runs one job at a time on all its threads:
/// job.work(w) on thread w. A stream of a loader without persistent workers owns a pool for its
/// epoch; a loader with persistent_workers keeps one pool whose threads wait for the next job.
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace volt::detail {

/// What the workers of a pool run. work() must not throw (failures go to the consumer as data);
/// cancel() asks every work() call to return soon and must be callable from any thread.
class WorkerJob {
 public:
  virtual ~WorkerJob() = default;
  virtual void work(int64_t worker) = 0;
  virtual void cancel() = 0;
};

/// Thread-safe. The destructor cancels the running job and joins every thread.
class WorkerPool {
 public:
  explicit WorkerPool(int64_t num_workers);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int64_t num_workers() const { return static_cast<int64_t>(threads_.size()); }
  /// Runs `job` on every worker and returns at once. A job still running is cancelled first and
  /// left by every worker before this one starts.
  void start(std::shared_ptr<WorkerJob> job);
  /// If `job` is the pool's current job: cancels it and waits until every worker has left it (so
  /// nothing touches the job's consumer side afterwards). Otherwise returns at once.
  void stop(const WorkerJob* job);
  /// True while `job` is the pool's current job (not replaced by a later start()).
  bool is_current(const WorkerJob* job) const;

 private:
  void loop(int64_t worker);
  void stop_locked(std::unique_lock<std::mutex>& lock);

  mutable std::mutex mutex_;
  std::condition_variable wake_;  // workers: a new job or shutdown
  std::condition_variable idle_;  // start/stop: the workers left the job
  std::shared_ptr<WorkerJob> job_;
  uint64_t generation_ = 0;
  int64_t busy_ = 0;  // workers that have not yet left the current job
  bool shutdown_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace volt::detail
