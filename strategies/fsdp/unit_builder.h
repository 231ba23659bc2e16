#pragma once
/// Where FSDP builds its units: which parameters each unit flattens into its FlatParam, at set-up
/// once the model is complete (PyTorch FSDP2's _fsdp_init: the managed modules and parameters), and
/// how the parameters get their own full storage back when the units are dissolved
/// (unshard_module).
///
/// [Note: who claims a parameter] Units wrap() sharded while the model was built come first (their
/// parameters are sharded already); then the units the auto_wrap_policy picks, innermost first, so
/// an inner unit's parameters are not also flattened into the unit around it; the root unit takes
/// whatever is left. A parameter registered in several modules is one flat entry of the unit that
/// claims it.
///
/// [Note: tied weights] A parameter held by several modules (tied embeddings) belongs to the
/// innermost unit that contains every module holding it, their common ancestor's unit, as in FSDP2:
/// a unit that held it alone would free it under FULL_SHARD while a module outside still reads it.
/// ParamOwners answers "is it held outside this unit?"; a unit skips such a parameter and an
/// enclosing unit (at the latest the root, which contains every module) claims it.
#include <torch/nn/module.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "volt/strategies/fsdp/fsdp_unit.h"
#include "volt/strategies/strategy_options.h"

namespace volt::detail {

class DeferredUnits;

/// How this strategy makes a unit's FlatParam: its place in the shard group, the dtypes, the
/// device, CPU offload.
struct FlatParamSpec {
  int64_t shard_rank = 0, shard_size = 1;
  at::ScalarType param_dtype = at::kFloat;  // gathered
  at::ScalarType shard_dtype = at::kFloat;  // the shard, its gradient and the optimizer state
  torch::Device device = torch::kCPU;
  bool offload = false;

  std::unique_ptr<FlatParam> make(const std::string& unit_name, std::vector<FlatParamEntry> entries) const;
};

/// Which modules hold each parameter directly, by their paths in the model (see the note).
class ParamOwners {
 public:
  explicit ParamOwners(torch::nn::Module& model);
  /// The path of a module holding `param` outside the subtree at `unit` ("" when none; the root
  /// unit "" contains every module; "<root>" names the model itself).
  std::string outside(const torch::Tensor& param, const std::string& unit) const;

 private:
  std::map<const c10::TensorImpl*, std::vector<std::string>> owners_;
};

/// The units of `model`: [0] the root, then the units `deferred` holds (named now, and emptied),
/// then the modules `policy` picks that wrap() did not make, in named_modules() order. Throws
/// ConfigError when a wrapped module is not part of the model, shares a weight outside its unit,
/// or the policy picks a module that is not a HookedModule.
std::vector<FSDPUnit> build_units(torch::nn::Module& model, const ModulePolicy& policy, DeferredUnits& deferred,
                                  const FlatParamSpec& spec);

/// Ends the units: every parameter gets its own full storage again with the trained values
/// (gathered over `shard_group`, one unit at a time; a collective), on `device` in `dtype`, and
/// loses its gradient.
void dissolve_units(std::vector<FSDPUnit>& units, ProcessGroup* shard_group, torch::Device device,
                    at::ScalarType dtype);

}  // namespace volt::detail
