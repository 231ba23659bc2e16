#include "volt/data/batch_stream.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "volt/core/errors.h"
#include "volt/data/worker_pool.h"

namespace volt::detail {

namespace {

/// Never empty: an empty result means success to capture()'s callers.
std::string message_of(const std::exception& e) {
  const auto* c = dynamic_cast<const c10::Error*>(&e);
  std::string m = c ? c->what_without_backtrace() : e.what();
  return m.empty() ? "an exception without a message" : m;
}

/// Runs `f`, turning any exception into its message (empty on success).
template <class F>
std::string capture(F&& f) {
  try {
    f();
    return {};
  } catch (const std::exception& e) {
    return message_of(e);
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

Batch collate_with(const StreamSpec& spec, std::vector<Batch> samples) {
  Batch b = spec.collate_fn ? spec.collate_fn(std::move(samples)) : collate(samples);
  return spec.pin_memory ? b.pin_memory() : b;
}

/// A loaded batch, or why not ("": the end of the shard, for iterable datasets).
struct Loaded {
  std::optional<Batch> batch;
  std::string error;
};

/// Map-style batch `i`, stopping early (returning nothing) when `stop` becomes true.
Loaded load_map(const StreamSpec& spec, int64_t i, const std::atomic<bool>* stop) {
  const auto& idx = *spec.indices;
  const int64_t begin = i * spec.batch_size;
  const int64_t end = std::min<int64_t>(begin + spec.batch_size, static_cast<int64_t>(idx.size()));
  std::vector<Batch> samples;
  samples.reserve(end - begin);
  Loaded out;
  for (int64_t k = begin; k < end; ++k) {
    if (stop && stop->load()) return out;
    std::string err = capture([&] { samples.push_back(spec.dataset->get(idx[k])); });
    if (!err.empty()) {
      out.error = str_cat("sample index ", idx[k], " (Dataset::get): ", err);
      return out;
    }
  }
  std::string err = capture([&] { out.batch = collate_with(spec, std::move(samples)); });
  if (!err.empty()) out.error = str_cat("samples ", idx[begin], "..", idx[end - 1], " (collate): ", err);
  return out;
}

/// Reads one shard of an iterable dataset and cuts it into batches.
class ShardBatcher {
 public:
  ShardBatcher(const StreamSpec& spec, ShardInfo shard) : spec_(spec), shard_(shard) {}

  /// The shard's next batch; an empty result (no batch, no error) at its end or when `stop` is set.
  Loaded next(const std::atomic<bool>* stop) {
    Loaded out;
    if (ended_) return out;
    const std::string where = str_cat("shard ", shard_.shard(), " of ", shard_.num_shards());
    if (!stream_) {
      std::string err = capture([&] { stream_ = spec_.iterable->stream(shard_); });
      if (err.empty() && !stream_) err = "IterableDataset::stream returned null";
      if (!err.empty()) return fail(str_cat(where, " (IterableDataset::stream): ", err));
    }
    std::vector<Batch> samples;
    samples.reserve(spec_.batch_size);
    while (static_cast<int64_t>(samples.size()) < spec_.batch_size) {
      if (stop && stop->load()) return out;
      std::optional<Batch> s;
      std::string err = capture([&] { s = stream_->next(); });
      if (!err.empty()) return fail(str_cat("sample ", read_, " of ", where, " (SampleStream::next): ", err));
      if (!s) {
        ended_ = true;
        break;
      }
      ++read_;
      samples.push_back(std::move(*s));
    }
    if (samples.empty() || (ended_ && spec_.drop_last)) return out;
    const int64_t first = read_ - static_cast<int64_t>(samples.size());
    std::string err = capture([&] { out.batch = collate_with(spec_, std::move(samples)); });
    if (!err.empty()) return fail(str_cat("samples ", first, "..", read_ - 1, " of ", where, " (collate): ", err));
    return out;
  }

 private:
  Loaded fail(std::string msg) {
    ended_ = true;
    Loaded out;
    out.error = std::move(msg);
    return out;
  }
  const StreamSpec& spec_;
  ShardInfo shard_;
  std::unique_ptr<SampleStream> stream_;
  int64_t read_ = 0;
  bool ended_ = false;
};

DataError batch_error(int64_t batch, const std::string& worker, const std::string& msg) {
  return DataError(str_cat("DataLoader: loading batch ", batch, worker, " failed: ", msg));
}

}  // namespace

Batch load_map_batch(const StreamSpec& spec, int64_t i) {
  Loaded l = load_map(spec, i, nullptr);
  if (!l.error.empty()) throw batch_error(i, "", l.error);
  return std::move(*l.batch);
}

/// A stream's state; the subclasses load on the calling thread or consume workers' batches.
class StreamState {
 public:
  explicit StreamState(StreamSpec spec) : spec_(std::move(spec)), position_(spec_.start) {}
  virtual ~StreamState() = default;
  std::optional<Batch> next() {
    if (error_) throw *error_;
    try {
      return next_impl();
    } catch (const DataError& e) {
      error_ = e;
      throw;
    }
  }
  int64_t position() const { return position_; }

 protected:
  virtual std::optional<Batch> next_impl() = 0;
  StreamSpec spec_;
  int64_t position_;
  std::optional<DataError> error_;
};

namespace {

class SyncMapStream : public StreamState {
 public:
  using StreamState::StreamState;
  std::optional<Batch> next_impl() override {
    if (position_ >= spec_.num_batches) return std::nullopt;
    Batch b = load_map_batch(spec_, position_);
    ++position_;
    return b;
  }
};

class SyncIterableStream : public StreamState {
 public:
  explicit SyncIterableStream(StreamSpec spec) : StreamState(std::move(spec)), batcher_(spec_, spec_.shard) {}
  std::optional<Batch> next_impl() override {
    for (;;) {
      Loaded l = batcher_.next(nullptr);
      if (!l.error.empty()) throw batch_error(delivered_, "", l.error);
      if (!l.batch) return std::nullopt;
      if (delivered_++ < spec_.start) continue;  // resume: drop the batches already seen
      ++position_;
      return std::move(l.batch);
    }
  }

 private:
  ShardBatcher batcher_;
  int64_t delivered_ = 0;  // batches taken from the shard, dropped ones included
};

/// Batches the workers have produced, per worker, in the order each produced them. Worker w's
/// queue holds at most prefetch_factor batches: a full queue makes it wait.
class WorkerQueues : public WorkerJob {
 public:
  struct Slot {
    Loaded loaded;
    bool end = false;  // the worker has no more batches
  };
  explicit WorkerQueues(const StreamSpec& spec) : spec_(spec), queues_(spec.num_workers) {}

  void cancel() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    space_.notify_all();
    ready_.notify_all();
  }

  /// Worker side: waits for room in the worker's queue; false when cancelled.
  bool wait_for_room(int64_t w) {
    std::unique_lock<std::mutex> lock(mutex_);
    space_.wait(lock, [&] { return stop_ || static_cast<int64_t>(queues_[w].size()) < spec_.prefetch_factor; });
    return !stop_;
  }
  void push(int64_t w, Slot s) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queues_[w].push_back(std::move(s));
    }
    ready_.notify_all();
  }
  /// Consumer side: the next slot of worker `w`. DataError on timeout, or when another stream
  /// cancelled this one (persistent workers taken over).
  Slot pop(int64_t w, int64_t batch) {
    std::unique_lock<std::mutex> lock(mutex_);
    auto ready = [&] { return stop_ || !queues_[w].empty(); };
    if (spec_.timeout > 0) {
      if (!ready_.wait_for(lock, std::chrono::duration<double>(spec_.timeout), ready))
        throw DataError(str_cat("DataLoader: worker ", w, " produced no batch within timeout=", spec_.timeout,
                                " s while batch ", batch,
                                " was awaited; a Dataset::get, SampleStream::next or collate_fn that blocks? Fix it "
                                "or raise DataLoaderOptions::timeout (0 waits forever)"));
    } else {
      ready_.wait(lock, ready);
    }
    if (stop_)  // only another stream cancels a job whose consumer is still reading
      throw DataError(str_cat("DataLoader: this stream was stopped before batch ", batch,
                              ": a newer iterate() on the same loader took its persistent workers over; keep one "
                              "stream per loader at a time"));
    Slot s = std::move(queues_[w].front());
    queues_[w].pop_front();
    lock.unlock();
    space_.notify_all();
    return s;
  }

 protected:
  const StreamSpec& spec_;  // owned by the stream, which outlives the job's use by workers
  std::atomic<bool> stop_{false};

 private:
  std::mutex mutex_;
  std::condition_variable space_, ready_;
  std::vector<std::deque<Slot>> queues_;
};

/// Map-style: worker w loads the batches i >= start with i % num_workers == w, in order.
class MapJob : public WorkerQueues {
 public:
  using WorkerQueues::WorkerQueues;
  void work(int64_t w) override {
    const int64_t n = spec_.num_workers;
    for (int64_t i = spec_.start + ((w - spec_.start % n) % n + n) % n; i < spec_.num_batches; i += n) {
      if (!wait_for_room(w)) return;
      Loaded l = load_map(spec_, i, &stop_);
      if (l.error.empty() && !l.batch) return;  // cancelled mid-batch
      const bool failed = !l.error.empty();
      push(w, Slot{std::move(l), false});
      if (failed) return;
    }
  }
};

/// Iterable: worker w reads its shard to the end, then pushes an end marker.
class IterableJob : public WorkerQueues {
 public:
  using WorkerQueues::WorkerQueues;
  void work(int64_t w) override {
    ShardInfo shard = spec_.shard;
    shard.worker_id = w;
    shard.num_workers = spec_.num_workers;
    ShardBatcher batcher(spec_, shard);
    for (;;) {
      if (!wait_for_room(w)) return;
      Loaded l = batcher.next(&stop_);
      if (stop_) return;
      const bool end = !l.batch, clean_end = end && l.error.empty();
      push(w, Slot{std::move(l), clean_end});
      if (end) return;
    }
  }
};

class WorkerStream : public StreamState {
 public:
  explicit WorkerStream(StreamSpec spec) : StreamState(std::move(spec)) {
    if (spec_.iterable) {
      job_ = std::make_shared<IterableJob>(spec_);
      for (int64_t w = 0; w < spec_.num_workers; ++w) active_.push_back(w);
    } else {
      job_ = std::make_shared<MapJob>(spec_);
    }
    pool_ = spec_.persistent_pool ? spec_.persistent_pool : std::make_shared<WorkerPool>(spec_.num_workers);
    pool_->start(job_);
  }
  ~WorkerStream() override { release(); }

 protected:
  std::optional<Batch> next_impl() override {
    if (done_) return std::nullopt;
    try {
      auto b = spec_.iterable ? next_iterable() : next_map();
      if (!b) release();
      return b;
    } catch (...) {
      job_->cancel();  // the workers stop; the destructor joins them
      throw;
    }
  }

 private:
  std::optional<Batch> next_map() {
    if (position_ >= spec_.num_batches) return std::nullopt;
    const int64_t w = position_ % spec_.num_workers;
    WorkerQueues::Slot s = job_->pop(w, position_);
    if (!s.loaded.error.empty()) throw batch_error(position_, str_cat(" (worker ", w, ")"), s.loaded.error);
    ++position_;
    return std::move(s.loaded.batch);
  }

  std::optional<Batch> next_iterable() {
    while (!active_.empty()) {
      const int64_t w = active_[cursor_];
      const int64_t index = skipped_ < spec_.start ? skipped_ : position_;
      WorkerQueues::Slot s = job_->pop(w, index);
      if (!s.loaded.error.empty()) throw batch_error(index, str_cat(" (worker ", w, ")"), s.loaded.error);
      if (s.end) {  // this worker's shard is exhausted: the others go on round robin
        active_.erase(active_.begin() + cursor_);
        if (cursor_ >= static_cast<int64_t>(active_.size())) cursor_ = 0;
        continue;
      }
      cursor_ = (cursor_ + 1) % static_cast<int64_t>(active_.size());
      if (skipped_ < spec_.start) {  // resume: drop the batches already seen
        ++skipped_;
        continue;
      }
      ++position_;
      return std::move(s.loaded.batch);
    }
    return std::nullopt;
  }

  /// Stops and leaves the workers: joins an own pool, hands persistent workers back.
  void release() {
    done_ = true;
    if (!pool_) return;
    if (spec_.persistent_pool)
      pool_->stop(job_.get());
    else
      pool_.reset();  // cancels the job and joins the threads
    pool_.reset();
  }

  std::shared_ptr<WorkerQueues> job_;
  std::shared_ptr<WorkerPool> pool_;
  std::vector<int64_t> active_;  // iterable: workers whose shard has not ended
  int64_t cursor_ = 0;
  int64_t skipped_ = 0;
  bool done_ = false;
};

}  // namespace

}  // namespace volt::detail

namespace volt {

BatchStream::BatchStream(detail::StreamSpec spec) {
  if (spec.num_workers > 0)
    state_ = std::make_unique<detail::WorkerStream>(std::move(spec));
  else if (spec.iterable)
    state_ = std::make_unique<detail::SyncIterableStream>(std::move(spec));
  else
    state_ = std::make_unique<detail::SyncMapStream>(std::move(spec));
}
BatchStream::BatchStream(BatchStream&& other) noexcept = default;
BatchStream& BatchStream::operator=(BatchStream&& other) noexcept = default;
BatchStream::~BatchStream() = default;

std::optional<Batch> BatchStream::next() {
  VOLT_CHECK(state_ != nullptr, DataError, "BatchStream: next() on a moved-from stream");
  return state_->next();
}

int64_t BatchStream::position() const { return state_ ? state_->position() : 0; }

BatchStream::iterator::iterator(BatchStream* s) : stream_(s) { ++*this; }

BatchStream::iterator& BatchStream::iterator::operator++() {
  current_ = stream_->next();
  if (!current_) stream_ = nullptr;
  return *this;
}

}  // namespace volt
