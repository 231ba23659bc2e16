#include "volt/strategies/fsdp/flat_param.h"

#include <torch/torch.h>

#include "volt/core/compat.h"
#include "volt/core/errors.h"

namespace volt::detail {

FlatParam::FlatParam(std::string unit_name, std::vector<FlatParamEntry> entries, int64_t shard_rank, int64_t shard_size,
                     at::ScalarType param_dtype, torch::Device device, bool offload)
    : unit_name_(std::move(unit_name)),
      entries_(std::move(entries)),
      shard_rank_(shard_rank),
      shard_size_(shard_size),
      param_dtype_(param_dtype) {
  // With CPU offload the shard (and so its gradient and the optimizer state) lives in pinned host
  // memory; only the gathered parameters are on the compute device.
  offload_ = offload && !device.is_cpu();
  const torch::Device shard_device = offload_ ? torch::Device(torch::kCPU) : device;
  torch::NoGradGuard ng;
  for (auto& e : entries_) {
    e.offset = numel_;
    e.numel = e.param.numel();
    e.shape = e.param.sizes().vec();
    numel_ += e.numel;
  }
  padded_ = (numel_ + shard_size_ - 1) / shard_size_ * shard_size_;
  if (padded_ == 0) padded_ = shard_size_;
  const int64_t sn = padded_ / shard_size_;
  // The initial full flat values, then this rank's shard of them.
  auto fopts = torch::TensorOptions().dtype(torch::kFloat).device(shard_device);
  torch::Tensor flat = torch::zeros({padded_}, fopts);
  for (auto& e : entries_) flat.narrow(0, e.offset, e.numel).copy_(e.param.detach().reshape(-1));
  shard_ = flat.narrow(0, shard_rank_ * sn, sn).clone();
  if (offload_) shard_ = shard_.pin_memory();
  flat = torch::Tensor();
  // Module parameters become views into the unsharded buffer.
  full_ = torch::empty({padded_}, fopts.dtype(param_dtype_).device(device));
  for (auto& e : entries_) e.param.set_data(full_.narrow(0, e.offset, e.numel).view(e.shape));
  compat::free_storage(full_);
  // This rank's slices of each parameter (what the optimizer sees).
  const int64_t lo = shard_rank_ * sn, hi = lo + sn;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const auto& e = entries_[i];
    const int64_t a = std::max(lo, e.offset), b = std::min(hi, e.offset + e.numel);
    if (a >= b) continue;
    LocalSlice s;
    s.entry = i;
    s.shard_offset = a - lo;
    s.param_offset = a - e.offset;
    s.length = b - a;
    s.view = shard_.narrow(0, s.shard_offset, s.length).detach();
    s.view.requires_grad_(true);
    slices_.push_back(s);
  }
}

size_t FlatParam::unsharded_bytes() const { return compat::storage_nbytes(full_); }

void FlatParam::unshard_async(ProcessGroup* pg) {
  if (state_ != UnitState::Sharded) return;
  compat::refill_storage(full_, static_cast<size_t>(padded_) * full_.element_size());
  at::AutoDispatchBelowADInplaceOrView guard;
  // Offloaded: an asynchronous copy from pinned memory, cast on the way.
  send_ = shard_.to(torch::TensorOptions().device(full_.device()).dtype(param_dtype_), /*non_blocking=*/offload_);
  if (pg == nullptr || pg->size() == 1) {
    full_.copy_(send_);
    state_ = UnitState::Unsharded;
    return;
  }
  work_ = pg->all_gather_async(full_, send_);
  state_ = UnitState::Gathering;
}

void FlatParam::unshard(ProcessGroup* pg) {
  if (state_ == UnitState::Sharded) unshard_async(pg);
  if (state_ == UnitState::Gathering) {
    work_.wait();
    send_ = torch::Tensor();
    state_ = UnitState::Unsharded;
  }
}

void FlatParam::reshard() {
  if (state_ == UnitState::Gathering) work_.wait();
  compat::free_storage(full_);
  send_ = torch::Tensor();
  state_ = UnitState::Sharded;
}

void FlatParam::reduce_gradients(ProcessGroup* shard_pg, ProcessGroup* replicate_pg, at::ScalarType reduce_dtype,
                                 int64_t world_size) {
  torch::NoGradGuard ng;
  // Every rank takes part in the collectives for every unit, whether or not it got gradients here
  // (missing ones count as zeros): deciding locally to skip would put the ranks' collectives out of
  // step. Each rank's chunk carries one extra element, 1 if this rank had any gradient, so the
  // reduced chunk tells every rank whether *any* rank had one; if none did, the shard gradient
  // stays as it was (undefined: the optimizer skips the parameters, as on a single device).
  bool any = false;
  for (auto& e : entries_) any = any || e.param.grad().defined();
  const int64_t sn = shard_numel(), chunk = sn + 1;
  auto opts = torch::TensorOptions().dtype(reduce_dtype).device(full_.device());
  torch::Tensor flat = torch::zeros({padded_}, opts);
  for (auto& e : entries_) {
    if (e.param.grad().defined()) flat.narrow(0, e.offset, e.numel).copy_(e.param.grad().reshape(-1));
    e.param.mutable_grad() = torch::Tensor();  // free the full gradient
  }
  const bool alone = shard_size_ == 1 && (!replicate_pg || replicate_pg->size() == 1);
  if (alone) {
    // Nobody to agree with: no flag, no collective, no device sync.
    if (!any) return;
    accumulate_shard_grad(flat.narrow(0, 0, sn).to(torch::kFloat).div_(static_cast<double>(world_size)));
    return;
  }
  // Rank r's chunk: its sn gradient values, then the flag.
  torch::Tensor flags = torch::full({shard_size_, 1}, any ? 1.0 : 0.0, opts);
  flat = torch::cat({flat.view({shard_size_, sn}), flags}, 1).reshape(-1);
  // fp16 (16-mixed) has little range: a sum over the ranks of loss-scaled gradients overflows where
  // the mean would not. As PyTorch's FSDP (its gradient predivide factor), divide by f before the
  // sum and by world / f after it. Other dtypes sum first (one division, less rounding).
  double post = static_cast<double>(world_size);
  if (reduce_dtype == at::kHalf) {
    int64_t f = 1;
    while (world_size % f == 0 && world_size / f > f) f *= 2;
    flat.div_(static_cast<double>(f));
    post /= static_cast<double>(f);
  }
  torch::Tensor g = torch::empty({chunk}, flat.options().dtype(torch::kFloat));
  // Sum over shard ranks here, then over replicas; divide once by the whole world (a mean).
  if (shard_pg && shard_pg->size() > 1) {
    torch::Tensor gs = torch::empty({chunk}, flat.options());
    shard_pg->reduce_scatter(gs, flat, ReduceOp::Sum);
    g.copy_(gs);
  } else {
    g.copy_(flat.narrow(0, shard_rank_ * chunk, chunk));
  }
  if (replicate_pg && replicate_pg->size() > 1) replicate_pg->all_reduce(g, ReduceOp::Sum);
  if (g[sn].item<float>() == 0) return;  // no rank had a gradient for this unit
  accumulate_shard_grad(g.narrow(0, 0, sn).div_(post));
}

void FlatParam::accumulate_shard_grad(const torch::Tensor& g) {
  if (!offload_) {
    if (shard_grad_.defined())
      shard_grad_.add_(g);
    else
      shard_grad_ = g;
    return;
  }
  // Offloaded: the gradient shard joins the master shard in host memory, where the optimizer
  // steps. The first gradient of a step is copied into pinned memory without blocking the host
  // (backward goes on; FSDPStrategy waits once for all copies before the optimizer reads them).
  // A fresh tensor each step, as before: LibTorch's caching host allocator reuses pinned blocks
  // (and holds each until its copy is done), and a .grad someone kept is never overwritten.
  if (shard_grad_.defined()) {
    shard_grad_.add_(g.to(torch::kCPU));
    return;
  }
  shard_grad_ = torch::empty({shard_numel()}, torch::TensorOptions().dtype(torch::kFloat).pinned_memory(true));
  shard_grad_.copy_(g, /*non_blocking=*/true);
}

void FlatParam::expose_slice_grads() {
  if (!shard_grad_.defined()) return;
  for (auto& s : slices_) {
    // A frozen parameter (requires_grad false) gets no gradient, as on a single device.
    if (!entries_[s.entry].param.requires_grad()) continue;
    s.view.mutable_grad() = shard_grad_.narrow(0, s.shard_offset, s.length);
  }
}

torch::Tensor FlatParam::gather_full_fp32(ProcessGroup* pg) const {
  torch::Tensor full = torch::empty({padded_}, shard_.options());
  if (pg == nullptr || pg->size() == 1)
    full.copy_(shard_);
  else
    pg->all_gather(full, shard_);
  return full;
}

}  // namespace volt::detail
