#include "volt/strategies/fsdp/rank_agreement.h"

#include <torch/torch.h>

#include "volt/core/errors.h"

namespace volt::detail {

namespace {
/// A checksum of a tensor's bits: the sum of its elements read as integers of the same width
/// (modulo 2^64, so the order of summation does not matter and every rank computes the same).
int64_t bit_sum(const torch::Tensor& t) {
  torch::Tensor c = t.detach().cpu().contiguous();
  switch (c.element_size()) {
    case 1:
      return c.view(torch::kByte).sum(torch::kLong).item<int64_t>();
    case 2:
      return c.view(torch::kShort).sum(torch::kLong).item<int64_t>();
    case 4:
      return c.view(torch::kInt).sum(torch::kLong).item<int64_t>();
    case 8:
      return c.view(torch::kLong).sum(torch::kLong).item<int64_t>();
    default:
      return c.view(torch::kByte).sum(torch::kLong).item<int64_t>();
  }
}
}  // namespace

void RankAgreement::agree(const NamedTensors& states) const {
  if (states.empty() || world == nullptr) return;
  torch::NoGradGuard ng;
  if (sync_module_states) {
    for (const auto& [name, t] : states) {
      torch::Tensor d = t.detach();
      world->broadcast(d, 0);
    }
    return;
  }
  // One all-reduce (max) of each tensor's checksum and of its complement: the ranks agree on a
  // tensor exactly when max == min, and every rank reaches the same verdict before anyone throws.
  std::vector<int64_t> sums;
  for (const auto& st : states) sums.push_back(bit_sum(st.second));
  const size_t n = sums.size();
  std::vector<int64_t> both(sums);
  for (int64_t v : sums) both.push_back(~v);
  torch::Tensor t = torch::tensor(both, torch::kLong);
  world->all_reduce(t, ReduceOp::Max);
  auto a = t.accessor<int64_t, 1>();
  std::vector<std::string> differ;
  for (size_t i = 0; i < n; ++i)
    if (a[i] != ~a[n + i]) differ.push_back(states[i].first);
  if (differ.empty()) return;
  throw ConfigError(detail::str_cat(
      "FSDP: the ranks' initial values of '", differ.front(), "'",
      differ.size() > 1 ? detail::str_cat(" and ", differ.size() - 1, " more parameter(s)/buffer(s)") : "",
      " differ, and config key 'trainer.strategy.sync_module_states' is false, so nothing is broadcast: each "
      "rank's shard would come from a different model. Set trainer.strategy.sync_module_states: true to start "
      "every rank from rank 0's values, or build the model from the same seed (or checkpoint) on every rank"));
}

}  // namespace volt::detail
