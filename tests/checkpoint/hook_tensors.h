#pragma once
// Tensors that a module and a callback keep in checkpoints through on_save_checkpoint and check,
// bit for bit, in on_load_checkpoint (CheckpointMeta::tensors): float, bf16 and int64 values
// beyond 2^53, different on every rank and at every step. Used in-process and by the test worker.
#include <torch/torch.h>

#include <cstdint>
#include <fstream>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>

#include "volt/callbacks/callback.h"
#include "volt/module/lightning_module.h"
#include "volt/trainer/trainer.h"

namespace volt::testing {

/// The tensors rank `rank` adds at step `step`, named `<prefix>float`, `<prefix>bf16`, `<prefix>int64`.
inline std::map<std::string, torch::Tensor> hook_tensors(const std::string& prefix, int64_t rank, int64_t step) {
  std::map<std::string, torch::Tensor> m;
  m[prefix + "float"] = torch::arange(6, torch::kFloat).reshape({2, 3}) / 7.0 + static_cast<double>(rank) +
                        0.001 * static_cast<double>(step);
  m[prefix + "bf16"] = (torch::arange(4, torch::kFloat) / 3.0 + static_cast<double>(rank)).to(torch::kBFloat16);
  const int64_t big = (int64_t{1} << 53) + 1;  // not a double
  m[prefix + "int64"] = torch::tensor({big + rank, std::numeric_limits<int64_t>::max() - step, -(big + 2 * rank)},
                                      torch::TensorOptions().dtype(torch::kLong));
  return m;
}

/// Throws unless `got` holds exactly the tensors hook_tensors(prefix, rank, step) gives (names,
/// dtypes, shapes and bits); returns how many it checked.
inline int64_t check_hook_tensors(const std::map<std::string, torch::Tensor>& got, const std::string& prefix,
                                  int64_t rank, int64_t step) {
  int64_t n = 0;
  for (const auto& [name, want] : hook_tensors(prefix, rank, step)) {
    auto it = got.find(name);
    if (it == got.end()) throw std::runtime_error("on_load_checkpoint: no tensor '" + name + "'");
    const torch::Tensor& t = it->second;
    if (t.scalar_type() != want.scalar_type() || t.sizes() != want.sizes() || !torch::equal(t.cpu(), want))
      throw std::runtime_error("on_load_checkpoint: tensor '" + name + "' differs from the one saved on rank " +
                               std::to_string(rank));
    ++n;
  }
  return n;
}

/// Keeps hook_tensors("keeper.", rank, step) and the step (in `extra`) in every checkpoint and checks
/// them on load. With `mismatch_rank` == this rank, "keeper.float" has another shape there. With
/// `marks` set, each rank writes `<marks>/loaded_rank<r>.txt`: the tensors it checked on load.
class TensorKeeper : public Callback {
 public:
  explicit TensorKeeper(std::string marks = "", int64_t mismatch_rank = -1)
      : marks_(std::move(marks)), mismatch_rank_(mismatch_rank) {}
  std::string state_key() const override { return "TensorKeeper"; }
  void on_save_checkpoint(Trainer& t, LightningModule&, CheckpointMeta& c) override {
    for (auto& [k, v] : hook_tensors("keeper.", t.global_rank(), t.global_step())) c.tensors[k] = v;
    if (t.global_rank() == mismatch_rank_) c.tensors["keeper.float"] = torch::zeros({3});
    c.extra["keeper_step"] = t.global_step();
  }
  void on_load_checkpoint(Trainer& t, LightningModule&, const CheckpointMeta& c) override {
    received = static_cast<int64_t>(c.tensors.size());
    loaded = c.tensors.empty()
                 ? 0
                 : check_hook_tensors(c.tensors, "keeper.", t.global_rank(), c.extra["keeper_step"].as<int64_t>());
    if (!marks_.empty())
      std::ofstream(marks_ + "/loaded_rank" + std::to_string(t.global_rank()) + ".txt") << received << " " << loaded;
  }
  int64_t received = -1, loaded = -1;

 private:
  std::string marks_;
  int64_t mismatch_rank_;
};

/// The module's side: hook_tensors("model.", rank, step), checked on load.
inline void save_module_tensors(LightningModule& m, CheckpointMeta& c) {
  const int64_t rank = m.trainer()->global_rank(), step = m.trainer()->global_step();
  for (auto& [k, v] : hook_tensors("model.", rank, step)) c.tensors[k] = v;
  c.extra["model_step"] = step;
}
inline int64_t load_module_tensors(LightningModule& m, const CheckpointMeta& c) {
  if (c.tensors.empty()) return 0;
  return check_hook_tensors(c.tensors, "model.", m.trainer()->global_rank(), c.extra["model_step"].as<int64_t>());
}

}  // namespace volt::testing
