#include "volt/profiler/model_flops.h"

#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>

#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace volt {

namespace {
bool is_embedding(const torch::nn::Module& m) {
  // volt::hooked(Embedding(...)) takes the inner module's name and holds its weight itself.
  return dynamic_cast<const torch::nn::EmbeddingImpl*>(&m) != nullptr || m.name() == "torch::nn::EmbeddingImpl";
}
}  // namespace

ParameterCount count_parameters(const torch::nn::Module& module) {
  // modules(false): the module itself need not be owned by a shared_ptr.
  std::vector<const torch::nn::Module*> modules{&module};
  for (const auto& m : module.modules(/*include_self=*/false)) modules.push_back(m.get());
  std::unordered_map<const c10::TensorImpl*, int64_t> numel;
  std::unordered_set<const c10::TensorImpl*> in_embeddings, elsewhere;
  for (const torch::nn::Module* m : modules) {
    const bool emb = is_embedding(*m);
    for (const auto& p : m->named_parameters(/*recurse=*/false)) {
      const c10::TensorImpl* impl = p.value().unsafeGetTensorImpl();
      numel.emplace(impl, p.value().numel());
      (emb ? in_embeddings : elsewhere).insert(impl);
    }
  }
  ParameterCount c;
  for (const auto& [impl, n] : numel) {
    c.total += n;
    if (in_embeddings.count(impl) && !elsewhere.count(impl)) c.embedding += n;
  }
  return c;
}

double flops_per_token(int64_t non_embedding_params, int64_t attention_layers, int64_t heads, int64_t head_dim,
                       int64_t seq_len) {
  return 6.0 * static_cast<double>(non_embedding_params) +
         12.0 * static_cast<double>(attention_layers) * static_cast<double>(heads) * static_cast<double>(head_dim) *
             static_cast<double>(seq_len);
}

}  // namespace volt
