#pragma once
/// Writing a sharded checkpoint: a folder that every rank writes its own file into, in parallel,
/// with no gathering of tensors.
///
///   <dir>/rank_00000.ckpt ...   each rank's pieces (torch.load-compatible, see tensor_archive.h)
///   <dir>/manifest.yaml         every tensor: dtype, global shape, pieces [rank, start, length]
///                               of its flattened elements; plus epoch, step and metadata
///   <dir>/COMPLETE              written last, after a barrier: world size and manifest checksum
///
/// The folder is built as "<dir>.partial" and swapped into place atomically (renameat2 with
/// RENAME_EXCHANGE), so the previous checkpoint at <dir> survives a crash at any point.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "volt/checkpoint/checkpoint.h"
#include "volt/checkpoint/tensor_archive.h"

namespace volt {

struct ShardedTensor {
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  struct Piece {
    int64_t rank = 0, start = 0, length = 0;  // flat elements [start, start + length) in rank's file
  };
  std::vector<Piece> pieces;
};
/// section -> name -> tensor.
using ShardedManifest = std::map<std::string, std::map<std::string, ShardedTensor>>;

inline constexpr const char* kManifestFile = "manifest.yaml";
inline constexpr const char* kCompleteMarker = "COMPLETE";
std::string shard_file_name(int64_t rank);

class ShardedCheckpointWriter {
 public:
  /// A collective vote on `local_error` (empty = this rank succeeded): returns on every rank if
  /// all succeeded, else throws CheckpointError on every rank (naming the failing rank and `what`).
  /// A barrier that carries failure, so one rank's error fails all instead of hanging them.
  using Agree = std::function<void(const std::string& local_error, const std::string& what)>;
  /// Collective: every rank constructs it with the same `dir`. Rank 0 prepares the staging
  /// folder, then all ranks open their files. Throws CheckpointError on every rank if any failed.
  /// `save_id` (the same on every rank, different for every save) is recorded in every rank file
  /// and in the manifest, so a reader never assembles pieces of two saves.
  ShardedCheckpointWriter(std::string dir, int64_t rank, int64_t world_size, std::string save_id, Agree agree);
  /// A world of one: the save id is drawn here.
  ShardedCheckpointWriter(std::string dir, int64_t rank, int64_t world_size, Agree agree);
  /// This rank's file: add() its pieces (stored flattened, named as in the manifest).
  ArchiveWriter& file() { return *file_; }
  /// Rank 0 declares every piece of every rank (other ranks may skip this).
  void declare(const std::string& section, const std::string& name, at::ScalarType dtype,
               const std::vector<int64_t>& shape, int64_t rank, int64_t start, int64_t length);
  /// Collective: commits every file, then rank 0 writes the manifest and the marker and swaps the
  /// folder into place. Returns when the checkpoint is complete on disk. `local_error` non-empty
  /// (this rank failed while filling its file) aborts the save; the previous checkpoint stays.
  /// Throws CheckpointError on every rank if any failed.
  void commit(const CheckpointHeader& header, const std::string& local_error = "");

  /// Asynchronous saves (async_checkpoint_io.h): this rank's file defers its writes
  /// (ArchiveWriter::defer_writes), and commit() then only agrees that every rank copied its state
  /// aside. write_deferred() writes this rank's file, finish() completes the commit.
  void defer_writes();
  /// Writes and commits this rank's file after a deferred commit(): any thread, no collective.
  /// Returns the error ("" on success) for finish().
  std::string write_deferred();
  /// Collective, after write_deferred() on every rank (`error`: this rank's result): as the end of
  /// commit(), every rank agrees that every file was written, then rank 0 writes the manifest and
  /// the marker and swaps the folder into place. Throws CheckpointError on every rank if any failed.
  void finish(std::string error);
  /// Rank 0, where a collective is impossible (an exception is unwinding): completes the save when
  /// every rank's file of this save is in the folder within `timeout_s` (a rank's file appears only
  /// once that rank wrote it whole); else leaves it unfinished (removed as `*.partial` by the next
  /// run) and the previous checkpoint as it was. Returns whether the checkpoint is complete (true
  /// on the other ranks, which leave it to rank 0).
  bool finish_without_agreement(double timeout_s);

 private:
  std::string dir_, staging_;
  int64_t rank_, world_size_;
  std::string save_id_;
  Agree agree_;
  bool deferred_ = false;
  CheckpointHeader header_;  // for the manifest, by a deferred commit
  void phase(const std::string& what, std::string error);
  /// Rank 0: the manifest and the marker, then the folder swapped into place.
  void write_manifest();
  std::unique_ptr<ArchiveWriter> file_;
  ShardedManifest manifest_;
};

namespace detail {
/// A random id for one save (16 hex digits, 48 random bits).
std::string new_save_id();
/// Replaces `dst` (file or folder, may be absent) by `src` atomically; the old one is removed.
void swap_into_place(const std::string& src, const std::string& dst);
}  // namespace detail

}  // namespace volt
