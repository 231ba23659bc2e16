#pragma once
/// Where FSDP describes its state for checkpoints: state_layout() gives checkpoint/ one FlatGroup
/// per unit (entries, this rank's slices and shard, and the collectives that gather or reduce over
/// the unit's shard group), and checkpoint/ writes either format from it (full: gathered one field
/// of one group at a time; sharded: each rank its own ranges) and reads either back into this
/// rank's ranges, whatever world size, wrap policy or sharding strategy wrote it. FSDP writes no
/// checkpoint code of its own. model_state_dict's whole tensors are gathered here too.
///
/// [Note: who writes under HYBRID_SHARD] The replicas hold identical shards, so only the first
/// replica (global ranks 0 .. shard size - 1, where the shard index equals the rank) writes the
/// pieces; FlatGroup::writes is false on every other rank.
#include <torch/types.h>

#include <map>
#include <string>
#include <vector>

#include "volt/checkpoint/state_layout.h"
#include "volt/strategies/fsdp/fsdp_mesh.h"
#include "volt/strategies/fsdp/fsdp_unit.h"

namespace torch::nn {
class Module;
}

namespace volt::detail {

/// The layout of `model` sharded into `units`: one FlatGroup per unit, the buffers whole, and
/// `optimizers` for their state. `global_rank`: this rank in the world. Collective use only
/// through the groups' gather / all_reduce.
StateLayout fsdp_state_layout(std::vector<FSDPUnit>& units, const FSDPMesh& mesh, torch::nn::Module& model,
                              const OptimizerList& optimizers, int64_t global_rank);

/// Every parameter and buffer of `model` at full shape, on the CPU (each unit all-gathered in turn
/// over the shard group: a collective; memory: one unit). A tied weight appears under each of its
/// names, as one process exports it.
std::map<std::string, torch::Tensor> full_state_dict(std::vector<FSDPUnit>& units, const FSDPMesh& mesh,
                                                     torch::nn::Module& model);

}  // namespace volt::detail
