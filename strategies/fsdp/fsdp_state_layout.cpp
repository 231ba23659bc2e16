#include "volt/strategies/fsdp/fsdp_state_layout.h"

#include <torch/nn/module.h>

namespace volt::detail {

namespace {
FlatGroup flat_group(FlatParam& f, const FSDPMesh& mesh, bool writes) {
  ProcessGroup* pg = mesh.shard_group();
  FlatGroup g;
  for (const auto& e : f.entries()) g.entries.push_back({e.name, e.shape, e.offset, e.numel});
  for (const auto& s : f.slices()) g.slices.push_back({s.entry, s.shard_offset, s.param_offset, s.length, s.view});
  g.shard = f.shard();
  g.shard_numel = f.shard_numel();
  g.shard_size = mesh.shard_size();
  g.shard_index = mesh.shard_rank();
  g.writes = writes;
  const int64_t padded = f.padded_numel();
  g.gather = [pg, padded](const torch::Tensor& local) {
    if (pg == nullptr || pg->size() == 1) return local;
    torch::Tensor full = torch::empty({padded}, local.options());
    pg->all_gather(full, local);
    return full;
  };
  g.all_reduce = [pg](const torch::Tensor& t, ReduceOp op) {
    if (pg == nullptr) return t;
    torch::Tensor c = t.clone();
    pg->all_reduce(c, op);
    return c;
  };
  return g;
}
}  // namespace

StateLayout fsdp_state_layout(std::vector<FSDPUnit>& units, const FSDPMesh& mesh, torch::nn::Module& model,
                              const OptimizerList& optimizers, int64_t global_rank) {
  StateLayout l;
  l.optimizers = optimizers;
  for (auto& kv : model.named_buffers()) l.buffers.emplace_back(kv.key(), kv.value());
  const bool writes = global_rank < mesh.shard_size();  // the first replica (see the note)
  for (auto& u : units) l.groups.push_back(flat_group(*u.flat, mesh, writes));
  return l;
}

std::map<std::string, torch::Tensor> full_state_dict(std::vector<FSDPUnit>& units, const FSDPMesh& mesh,
                                                     torch::nn::Module& model) {
  std::map<std::string, torch::Tensor> out;
  std::map<const c10::TensorImpl*, std::string> entry_of;
  for (auto& u : units) {
    torch::Tensor full = u.flat->gather_full(mesh.shard_group());
    for (auto& e : u.flat->entries()) {
      out[e.name] = full.narrow(0, e.offset, e.numel).view(e.shape).clone().cpu();
      entry_of[e.param.unsafeGetTensorImpl()] = e.name;
    }
  }
  // A tied weight is one flat entry; its other names are exported too, as one process exports them.
  for (auto& kv : model.named_parameters()) {
    auto it = entry_of.find(kv.value().unsafeGetTensorImpl());
    if (!out.count(kv.key()) && it != entry_of.end()) out[kv.key()] = out[it->second];
  }
  for (auto& kv : model.named_buffers()) out[kv.key()] = kv.value().detach().cpu().clone();
  return out;
}

}  // namespace volt::detail
