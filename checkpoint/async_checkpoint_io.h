#pragma once
/// AsyncCheckpointIO: checkpoints written on a background thread while training goes on
/// (Lightning's AsyncCheckpointIO plugin; `trainer.plugins: [AsyncCheckpointIO]`).
///
/// A save runs its collectives and copies this rank's tensors into host memory on the training
/// thread (stage_state: a full save gathers each FSDP unit first, as a synchronous one does), then
/// returns; a thread of its own writes the file. At most one save is in flight: the next save
/// waits for it, and so does wait() (the end of fit). Waiting is collective: every rank learns
/// whether every rank's write succeeded (a failure is a CheckpointError naming the file, on every
/// rank), and a sharded folder gets its manifest and COMPLETE marker only then, so no collective
/// ever runs on the background thread. Files keep their atomicity: a full file appears by rename
/// once whole, a sharded folder is swapped into place once complete, so a crash at any moment
/// leaves the previous checkpoint intact.
///
/// Memory: one copy of the state this rank writes (rank 0 of a full FSDP save: the whole model and
/// optimizer state) in host memory, kept from the first save to the AsyncCheckpointIO's end and
/// reused by every save (a fresh buffer's page faults cost 4x the copy).
///
/// Ownership: owns the thread and the staged copy; borrows the StateComm given to save(), which
/// must outlive the save. Thread-safety: the training thread only (the background thread is
/// internal).
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "volt/checkpoint/state_io.h"

namespace volt {

class AsyncCheckpointIO {
 public:
  AsyncCheckpointIO() = default;
  /// Joins the writing thread if one runs (as abandon()).
  ~AsyncCheckpointIO();
  AsyncCheckpointIO(const AsyncCheckpointIO&) = delete;
  AsyncCheckpointIO& operator=(const AsyncCheckpointIO&) = delete;

  /// Collective. Waits for the previous save (wait()), copies this rank's state aside and starts
  /// writing it; returns as soon as the copy is made. A failure before the copy is complete throws
  /// CheckpointError on every rank at once, as a synchronous save would.
  void save(const StateLayout& layout, const CheckpointHeader& header, const std::string& path, CheckpointFormat format,
            StateComm& comm);
  /// Collective. Waits until the pending save is complete on disk on every rank, then runs the
  /// actions after_save() queued, in order. A write that failed on any rank throws CheckpointError
  /// naming the file on every rank; its queued actions are dropped. Nothing pending: returns.
  void wait();
  /// Runs `action` once the pending save is complete on disk (at once when none is pending).
  /// ModelCheckpoint's removal of an older checkpoint goes here: never before its successor is whole.
  void after_save(std::function<void()> action);
  /// Where no collective is possible (an exception unwinding): waits for this rank's writing thread
  /// and completes what needs no other rank (a full file; a sharded folder when rank 0 finds every
  /// rank's file in it within `timeout_s`; negative: 5 s or 3 times this rank's own write, the
  /// longer). Queued actions are dropped. Never throws.
  void abandon(double timeout_s = -1) noexcept;
  /// Whether a save was started and not yet waited for.
  bool pending() const { return staged_ != nullptr; }

  /// Seconds the last save took on the training thread (checks, collectives, copy) and on the
  /// background thread (writing; known once waited for); bytes it copied aside on this rank.
  struct LastSave {
    double staged_s = 0, written_s = 0;
    int64_t bytes = 0;
  };
  LastSave last_save() const { return last_; }

 private:
  void join() noexcept;
  std::unique_ptr<StagedSave> staged_;
  std::thread thread_;
  std::vector<std::function<void()>> after_;
  LastSave last_;
};

}  // namespace volt
