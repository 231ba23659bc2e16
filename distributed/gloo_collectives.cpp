#include "volt/distributed/gloo_collectives.h"

#include <torch/torch.h>

#include "volt/core/large_buffer.h"

namespace volt::detail {

torch::Tensor as_wire(const torch::Tensor& t) { return t.scalar_type() == at::kBFloat16 ? t.view(at::kHalf) : t; }

GlooExchange gloo_all_gather(compat::C10dBackend& pg, torch::Tensor& flat, const torch::Tensor& shard, int64_t r,
                             int64_t n) {
  // [Note: Gloo all-gather as an all-to-all] Gloo's list all-gather copies the input into a flat
  // buffer, gathers into a second full-size buffer and copies that out again: on loopback it took
  // 60-66 ms for a 68 MB unit at two ranks, where an all-reduce of the same 68 MB took 38 ms
  // (LibTorch 1.13, one thread per rank). An all-to-all writes straight into the flat output. With
  // two ranks each sends its shard to the other (a split of 0 to itself) and copies its own: no
  // extra buffer, 16-19 ms. With more ranks the input is the shard repeated once per rank (a
  // transient of the unit's size, as Gloo's own buffer was, mapped on huge pages): bench_fsdp's
  // FULL_SHARD step at 4 ranks took 3.00-3.14 s against 3.59-3.61 s with the list all-gather.
  const int64_t sn = shard.numel();
  torch::Tensor whole = as_wire(flat.view(-1));
  torch::Tensor one = as_wire(shard.contiguous().view(-1));
  torch::Tensor in, out;
  std::vector<int64_t> out_splits, in_splits;  // empty: equal splits
  at::AutoDispatchBelowADInplaceOrView guard;
  if (n == 2) {
    whole.narrow(0, r * sn, sn).copy_(one);
    in = one;
    out = whole.narrow(0, (1 - r) * sn, sn);
    out_splits = {r == 0 ? 0 : sn, r == 0 ? sn : 0};
    in_splits = out_splits;  // two vectors: Gloo's alltoall_base moves from each
  } else {
    in = empty_large(n * sn, one.options());
    in.view({n, sn}).copy_(one.view({1, sn}).expand({n, sn}));
    out = whole;
  }
  GlooExchange x;
  x.work = pg.alltoall_base(out, in, out_splits, in_splits);
  x.bytes_sent = sn * one.element_size() * (n - 1);
  return x;
}

namespace {
/// The local half of Gloo's reduce-scatter: `target` = the sum (or mean) of this rank's chunk of
/// `whole` (its input, which it kept) and the other ranks' chunks in `out` (rank order, its own
/// left out), in fp32. Frees `whole` once it is read.
void sum_chunks(torch::Tensor& target, torch::Tensor& out, torch::Tensor& whole, int64_t n, int64_t r, bool bf16,
                ReduceOp op) {
  at::AutoDispatchBelowADInplaceOrView g;
  const int64_t sn = target.numel();
  torch::Tensor own = whole.narrow(0, r * sn, sn);
  // Two fp32 ranks: the sum goes into the receive buffer, which then becomes the target's storage
  // (when the target owns all of its storage: no view of it can be left behind). The target's own
  // memory is never written: a fresh mapping (FSDP's, large_buffer.h) never becomes resident, so
  // the reduction holds one chunk less at its peak.
  if (n == 2 && !bf16 && out.scalar_type() == at::kFloat && target.scalar_type() == at::kFloat && !target.is_view() &&
      target.is_contiguous() && target.storage_offset() == 0 && target.storage().nbytes() == target.nbytes()) {
    out.add_(own);
    own = torch::Tensor();
    whole = torch::Tensor();
    if (op == ReduceOp::Mean) out.div_(2.0);
    target.set_(out.view(target.sizes()));
    return;
  }
  auto f32 = [bf16](const torch::Tensor& t) { return (bf16 ? t.view(at::kBFloat16) : t).to(at::kFloat); };
  auto chunk = [&](int64_t j) { return f32(j == r ? own : out.narrow(0, (j < r ? j : j - 1) * sn, sn)); };
  // Summed straight into the target when it is fp32 (FSDP's case), else through a temporary.
  torch::Tensor dst = target.view(-1);
  const bool direct =
      dst.scalar_type() == at::kFloat && dst.is_contiguous() && !dst.storage().is_alias_of(whole.storage());
  torch::Tensor acc = direct ? dst : torch::empty({sn});
  at::add_out(acc, chunk(0), chunk(1));
  for (int64_t j = 2; j < n; ++j) acc.add_(chunk(j));
  own = torch::Tensor();
  whole = torch::Tensor();
  if (op == ReduceOp::Mean) acc.div_(static_cast<double>(n));
  if (!acc.is_same(dst)) dst.copy_(acc);
}
}  // namespace

GlooExchange gloo_reduce_scatter(compat::C10dBackend& pg, torch::Tensor& shard, const torch::Tensor& full, ReduceOp op,
                                 int64_t r, int64_t n) {
  // all-to-all of the other ranks' chunks: chunk j of every rank lands on rank j, and each rank keeps
  // its own chunk where it is (a split of 0 to itself), so the receive buffer is (N-1)/N of the
  // input rather than all of it. When finished, the N chunks are summed in rank order in fp32.
  at::AutoDispatchBelowADInplaceOrView guard;
  const int64_t sn = shard.numel();
  torch::Tensor whole = as_wire(full.contiguous().view(-1));
  torch::Tensor in;
  if (r == 0)
    in = whole.narrow(0, sn, (n - 1) * sn);
  else if (r == n - 1)
    in = whole.narrow(0, 0, (n - 1) * sn);
  else
    in = torch::cat({whole.narrow(0, 0, r * sn), whole.narrow(0, (r + 1) * sn, (n - 1 - r) * sn)});
  torch::Tensor out = empty_large((n - 1) * sn, in.options());
  std::vector<int64_t> out_splits(static_cast<size_t>(n), sn);
  out_splits[static_cast<size_t>(r)] = 0;
  std::vector<int64_t> in_splits = out_splits;  // two vectors: Gloo's alltoall_base moves from each
  const bool bf16 = full.scalar_type() == at::kBFloat16;
  GlooExchange x;
  x.work = pg.alltoall_base(out, in, out_splits, in_splits);
  x.bytes_sent = sn * in.element_size() * (n - 1);
  torch::Tensor target = shard;
  x.finish = [target, out, in, whole, bf16, n, r, op]() mutable {
    in = torch::Tensor();  // the input may go as soon as the exchange is done
    sum_chunks(target, out, whole, n, r, bf16, op);
  };
  return x;
}

}  // namespace volt::detail
