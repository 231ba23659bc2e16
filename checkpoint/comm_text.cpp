#include "volt/checkpoint/comm_text.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstring>

namespace volt::detail {

std::string broadcast_text(StateComm& comm, const std::string& text, int64_t src) {
  if (comm.world_size() == 1) return text;
  const auto n = static_cast<int64_t>(
      comm.broadcast(torch::tensor(static_cast<double>(text.size()), torch::kDouble), src).item<double>());
  if (n == 0) return {};
  torch::Tensor bytes = torch::zeros({n}, torch::kUInt8);
  if (comm.rank() == src) std::memcpy(bytes.data_ptr<uint8_t>(), text.data(), static_cast<size_t>(n));
  bytes = comm.broadcast(bytes, src);
  return std::string(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()), static_cast<size_t>(n));
}

FirstFailure first_failure(StateComm& comm, const std::string& local_error) {
  const int64_t world = comm.world_size();
  FirstFailure f;
  f.rank = static_cast<int64_t>(
      comm.all_reduce(torch::tensor(static_cast<double>(local_error.empty() ? world : comm.rank()), torch::kDouble),
                      ReduceOp::Min)
          .item<double>());
  if (f.rank < world) f.message = broadcast_text(comm, f.rank == comm.rank() ? local_error : std::string(), f.rank);
  return f;
}

}  // namespace volt::detail
