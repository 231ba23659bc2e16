#include "volt/checkpoint/async_checkpoint_io.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "volt/checkpoint/tensor_archive.h"

namespace volt {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

AsyncCheckpointIO::~AsyncCheckpointIO() {
  abandon();
  detail::release_deferred_buffers();  // the copies kept for the next save
}

void AsyncCheckpointIO::save(const StateLayout& layout, const CheckpointHeader& header, const std::string& path,
                             CheckpointFormat format, StateComm& comm) {
  wait();
  const auto t0 = std::chrono::steady_clock::now();
  staged_ = stage_state(layout, header, path, format, comm);
  last_ = {seconds_since(t0), 0, staged_->staged_bytes()};
  StagedSave* s = staged_.get();
  thread_ = std::thread([this, s] {
    const auto t1 = std::chrono::steady_clock::now();
    s->write();  // never throws: the error waits for finish()
    last_.written_s = seconds_since(t1);
  });
}

void AsyncCheckpointIO::join() noexcept {
  if (thread_.joinable()) thread_.join();
}

void AsyncCheckpointIO::wait() {
  if (!staged_) return;
  join();
  std::unique_ptr<StagedSave> s = std::move(staged_);
  std::vector<std::function<void()>> actions = std::move(after_);
  after_.clear();
  s->finish();  // collective; throws on every rank if any rank's write failed
  for (auto& a : actions) a();
}

void AsyncCheckpointIO::after_save(std::function<void()> action) {
  if (staged_)
    after_.push_back(std::move(action));
  else
    action();
}

void AsyncCheckpointIO::abandon(double timeout_s) noexcept {
  if (!staged_) return;
  join();
  after_.clear();
  if (timeout_s < 0) timeout_s = std::max(5.0, 3 * last_.written_s);
  try {
    if (!staged_->finish_alone(timeout_s))
      spdlog::warn("The asynchronous save of checkpoint '{}' did not complete; the previous checkpoint is kept",
                   staged_->path());
  } catch (const std::exception& e) {
    spdlog::warn("The asynchronous save of checkpoint '{}' did not complete ({}); the previous checkpoint is kept",
                 staged_->path(), e.what());
  }
  staged_.reset();
}

}  // namespace volt
