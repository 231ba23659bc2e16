#pragma once
/// The optimizer over this rank's shards: each FSDP-managed parameter in the optimizer's param
/// groups is replaced by the slices of it this rank's shards hold (LocalSlice::view, leaf views of
/// the shards), so the optimizer steps only the shard and its state is sharded like the
/// parameters. Param groups and their options stay as configure_optimizers() made them.
///
/// [Note: a parameter with no slice here] A parameter that lies wholly in other ranks' shards
/// leaves this rank's optimizer: another rank steps it. Parameters FSDP does not manage stay as
/// they are.
#include <torch/optim/optimizer.h>

#include <vector>

#include "volt/strategies/fsdp/fsdp_unit.h"

namespace volt::detail {

/// Points `optimizer` at this rank's slices of `units`. ConfigError when it has state already (it
/// must be created in configure_optimizers() without being stepped).
void step_shards_only(torch::optim::Optimizer& optimizer, std::vector<FSDPUnit>& units);

}  // namespace volt::detail
