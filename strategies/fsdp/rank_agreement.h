#pragma once
/// The ranks agree on the values they shard: each rank keeps only its shard of every parameter, so
/// ranks that started from different values would train one model stitched from several.
///
/// [Note: sync_module_states] true: rank 0's parameters and buffers are broadcast before sharding
/// (PyTorch's meaning). false: nothing is sent but one all-reduce of a checksum per tensor; a
/// difference is a ConfigError on every rank, and since every rank reaches the same verdict from
/// the same reduced values, none is left waiting in a collective when the others throw.
///
/// Called for the whole model at set-up and for each unit wrap() shards while the model is built
/// (deferred_wrap.h), before anything is sharded. Thread-safety: the training thread.
#include <torch/types.h>

#include "volt/checkpoint/optimizer_state.h"
#include "volt/distributed/process_group.h"

namespace volt::detail {

struct RankAgreement {
  ProcessGroup* world = nullptr;    // every rank (borrowed); null in one process: nothing to agree on
  bool sync_module_states = false;  // broadcast rank 0's values instead of checking

  /// Makes `states` (name, tensor; in place when broadcast) equal on every rank, or throws
  /// ConfigError naming the first that differs and the key to set (a collective: every rank calls it
  /// with the same names).
  void agree(const NamedTensors& states) const;
};

}  // namespace volt::detail
