#pragma once
/// Writing and reading a strategy's state (state_layout.h) in either checkpoint format: the one
/// path every strategy's checkpoints take.
///   full     one file, torch.load-compatible, written by rank 0 (tensor_archive.h)
///   sharded  a folder, one file per rank and a manifest derived from the layout
///            (sharded_checkpoint.h)
/// Loading reads only this rank's ranges from either format and any rank layout, which is how FSDP
/// reshards to another world size, wrap policy or sharding strategy.
///
/// Every function here is collective: all ranks call it with their own layout. A failure on any
/// rank throws CheckpointError on every rank, naming the rank and the cause (never a hang).
#include <memory>
#include <string>

#include "volt/checkpoint/checkpoint.h"
#include "volt/checkpoint/checkpoint_reader.h"
#include "volt/checkpoint/state_layout.h"

namespace volt {

enum class CheckpointFormat { Full, Sharded };

/// Writes `layout` with `header` at `path`. The file or folder appears atomically.
void save_state(const StateLayout& layout, const CheckpointHeader& header, const std::string& path,
                CheckpointFormat format, StateComm& comm);

/// A save whose state stage_state() copied into host memory, to be written while training goes
/// on (async_checkpoint_io.h). write() writes this rank's files on any thread, with no collective;
/// finish() then completes the save on every rank (collective, the training thread).
/// Thread-safety: write() on one thread, then finish() after it returned.
class StagedSave {
 public:
  virtual ~StagedSave() = default;
  /// Writes this rank's file (a full save: rank 0's; the others have none). Never throws: the
  /// error is kept for finish(). A full file appears at path() atomically once written.
  virtual void write() = 0;
  /// Collective: every rank learns whether every rank's write() succeeded (CheckpointError naming
  /// the file on every rank otherwise; the previous checkpoint stays); a sharded folder gets its
  /// manifest and COMPLETE and is swapped into place.
  virtual void finish() = 0;
  /// Where no collective is possible (an exception unwinding): whether the checkpoint is complete
  /// after write(). A full file is; a sharded folder is completed by rank 0 when every rank's file
  /// appears within `timeout_s` (else left unfinished, the previous checkpoint as it was).
  virtual bool finish_alone(double timeout_s) = 0;
  const std::string& path() const { return path_; }
  /// Bytes this rank copied aside.
  int64_t staged_bytes() const { return staged_bytes_; }

 protected:
  std::string path_;
  int64_t staged_bytes_ = 0;
};

/// The part of save_state that must run on the training thread: the same checks and collectives
/// (a full save gathers each FSDP unit as it does), with every tensor this rank would write copied
/// into host memory instead. A failure so far throws CheckpointError on every rank, as save_state.
/// `comm` must outlive the StagedSave.
std::unique_ptr<StagedSave> stage_state(const StateLayout& layout, const CheckpointHeader& header,
                                        const std::string& path, CheckpointFormat format, StateComm& comm);

/// Loads the model (and, when layout.optimizers is not empty and the checkpoint has it, the optimizer
/// state) into `layout`'s tensors. Throws CheckpointError naming the file on any mismatch.
/// Not collective by itself (every rank reads its own ranges).
void load_state(const StateLayout& layout, const CheckpointReader& checkpoint);

namespace detail {
/// Every rank learns whether all succeeded: throws `local_error` (as a CheckpointError) where it is
/// non-empty, and on the other ranks a CheckpointError naming `what`, the lowest failing rank and
/// its message. Collective: this is how one rank's failed write fails all ranks instead of hanging
/// them, with the cause in every rank's log.
void agree_or_throw(StateComm& comm, const std::string& local_error, const std::string& what);
/// Checks that `ckpt` has exactly the model tensors `expected` (name, shape).
void check_checkpoint_model(const CheckpointReader& ckpt,
                            const std::vector<std::pair<std::string, std::vector<int64_t>>>& expected);
}  // namespace detail

}  // namespace volt
