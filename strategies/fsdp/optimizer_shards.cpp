#include "volt/strategies/fsdp/optimizer_shards.h"

#include <map>

#include "volt/core/errors.h"

namespace volt::detail {

void step_shards_only(torch::optim::Optimizer& optimizer, std::vector<FSDPUnit>& units) {
  VOLT_CHECK(optimizer.state().empty(), ConfigError,
             "FSDP: the optimizer already has state; create it in configure_optimizers() without stepping it");
  // Every FSDP-managed parameter maps to its slices on this rank: possibly none.
  std::map<c10::TensorImpl*, std::vector<torch::Tensor>> slices;
  for (auto& u : units) {
    for (auto& e : u.flat->entries()) slices[e.param.unsafeGetTensorImpl()];
    for (auto& s : u.flat->slices()) slices[u.flat->entries()[s.entry].param.unsafeGetTensorImpl()].push_back(s.view);
  }
  for (auto& g : optimizer.param_groups()) {
    std::vector<torch::Tensor> params;
    for (auto& p : g.params()) {
      auto it = slices.find(p.unsafeGetTensorImpl());
      if (it == slices.end()) {
        params.push_back(p);
        continue;
      }
      for (auto& v : it->second) params.push_back(v);
    }
    g.params() = params;
  }
}

}  // namespace volt::detail
