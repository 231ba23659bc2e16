#pragma once
// The process-group scenario: every rank of a world of separate processes runs volt's ProcessGroup
// collectives on the inputs below (tests/worker/process_group_scenario.cpp, started by
// tests/distributed/test_process_group.cpp), which checks the results against references it
// computes from the same inputs without any collective.
#include <torch/torch.h>

#include <string>

namespace volt::testing {

/// Rank `rank`'s input to the collectives checked under `name`, in a world of `world` ranks.
/// Values differ per rank (and some per element in sign) so that Sum, Max, Min and Mean all differ.
inline torch::Tensor pg_input(const std::string& name, int64_t rank, int64_t world) {
  const double r = static_cast<double>(rank);
  const auto f32 = torch::kFloat;
  if (name == "f32" || name == "f64") {
    auto t = (torch::arange(6, torch::kDouble) - 2.5) * (rank % 2 ? -1.0 : 1.0) + 10.0 * r;
    return t.to(name == "f32" ? torch::kFloat : torch::kDouble);
  }
  if (name == "i64") return torch::tensor({3, -7, 100}, torch::kLong) * (rank + 1) + rank;
  // Half types: reduced in fp32 on Gloo. 1e30 is beyond fp16's range (bf16 only).
  if (name == "bf16") return (torch::tensor({0.5, 1000.0, 1e-3, -3.25, 1e30}, f32) * (r + 1)).to(torch::kBFloat16);
  if (name == "f16") return (torch::tensor({0.5, 1000.0, 1e-3, -3.25}, f32) * (r + 1)).to(torch::kHalf);
  if (name == "gather_f32") return torch::arange(3, f32) + 100.0 * r;
  // Data movement sends bf16 as fp16 bits: values fp16 cannot hold must arrive bit for bit.
  if (name == "gather_bf16")
    return torch::tensor({1e30 * (r + 1), 1e-20, -3e38, 0.1 * (r + 1)}, f32).to(torch::kBFloat16);
  if (name == "scatter_f32") return torch::arange(4 * world, f32) * (0.25 * (r + 1)) + r;
  if (name == "scatter_bf16") return (torch::arange(4 * world, f32) * (0.37 * (r + 1)) + 100.0).to(torch::kBFloat16);
  if (name == "bcast_f32") return torch::arange(6, f32).view({2, 3}) + 10.0 * (r + 1);
  if (name == "bcast_bf16") return torch::tensor({1e30 * (r + 1), -1e-20 * (r + 1), 7.0 + r}, f32).to(torch::kBFloat16);
  if (name == "bcast_i64") return torch::tensor({int64_t{1} << 40, int64_t{-5}}, torch::kLong) + rank;
  throw std::invalid_argument("pg_input: unknown input " + name);
}

/// Runs every collective of the scenario at this rank (rank and rendezvous from the environment,
/// as torchrun sets them) and writes the results, name -> tensor, to `<out>.<rank>`
/// (torch::pickle_save). Returns the process exit code.
int run_process_group_scenario(const std::string& out);

}  // namespace volt::testing
