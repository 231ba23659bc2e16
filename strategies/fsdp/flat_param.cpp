#include "volt/strategies/fsdp/flat_param.h"

#include <torch/torch.h>

#include "volt/core/compat.h"
#include "volt/core/errors.h"
#include "volt/core/host_buffers.h"
#include "volt/core/large_buffer.h"

namespace volt::detail {

FlatParam::FlatParam(std::string unit_name, std::vector<FlatParamEntry> entries, int64_t shard_rank, int64_t shard_size,
                     at::ScalarType param_dtype, torch::Device device, bool offload, at::ScalarType shard_dtype)
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
  // This rank's shard, copied piece by piece from the parameters that overlap it: no full-size
  // temporary, so a unit being sharded costs its own size once (its parameters), not twice.
  auto fopts = torch::TensorOptions().dtype(shard_dtype).device(shard_device);
  // CPU offload: exactly sn elements of host memory, page-locked where the device copies from it
  // (pin_memory() would round the block up to a power of two and keep a pageable copy meanwhile).
  if (offload && shard_device.is_cpu())
    shard_ = host_buffer(sn, shard_dtype, /*pinned=*/offload_, "fsdp.shard").zero_();
  else
    shard_ = torch::zeros({sn}, fopts);
  const int64_t lo = shard_rank_ * sn, hi = lo + sn;
  for (auto& e : entries_) {
    const int64_t a = std::max(lo, e.offset), b = std::min(hi, e.offset + e.numel);
    if (a < b) shard_.narrow(0, a - lo, b - a).copy_(e.param.detach().reshape(-1).narrow(0, a - e.offset, b - a));
  }
  // Module parameters become views into the unsharded buffer.
  full_ = torch::empty({padded_}, fopts.dtype(param_dtype_).device(device));
  for (auto& e : entries_) e.param.set_data(full_.narrow(0, e.offset, e.numel).view(e.shape));
  compat::free_storage(full_);
  state_ = UnitState::Sharded;
  // This rank's slices of each parameter (what the optimizer sees).
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

void FlatParam::release_params() {
  reshard();
  for (auto& e : entries_) {
    e.param.mutable_grad() = torch::Tensor();
    e.param.set_data(torch::empty({0}, e.param.options()));
  }
  release_grads();
  grad_host_ = torch::Tensor();
}

void FlatParam::bind_params() {
  // Views are taken with the storage present (the bounds check of a view wants it), then freed.
  compat::refill_storage(full_, static_cast<size_t>(padded_) * full_.element_size());
  for (auto& e : entries_) e.param.set_data(full_.narrow(0, e.offset, e.numel).view(e.shape));
  compat::free_storage(full_);
  state_ = UnitState::Sharded;
}

size_t FlatParam::unsharded_bytes() const { return compat::storage_nbytes(full_); }

size_t FlatParam::send_bytes() const { return send_.defined() ? send_.nbytes() : 0; }

void FlatParam::refill_full() {
  const size_t nbytes = static_cast<size_t>(padded_) * full_.element_size();
  if (compat::storage_nbytes(full_) == nbytes) return;
  // A large unit on the CPU gets its own huge-page mapping (large_buffer.h: page faults).
  compat::refill_storage(full_, allocate_buffer(full_.device(), nbytes), nbytes);
}

void FlatParam::unshard_async(ProcessGroup* pg) {
  if (state_ != UnitState::Sharded) return;
  refill_full();
  at::AutoDispatchBelowADInplaceOrView guard;
  // Offloaded: an asynchronous copy from pinned memory as it is, cast on the device (a copy that
  // also casts converts on the host first, into pageable memory, and then cannot overlap).
  torch::Tensor local = offload_ ? shard_.to(full_.device(), /*non_blocking=*/true) : shard_;
  if (pg == nullptr || pg->size() == 1) {
    // The shard is the whole unit: copy_ casts into the gathered buffer, and no cast copy of the
    // unit stays alive beside it (it did, for every gathered unit, until its reshard).
    full_.copy_(local);
    state_ = UnitState::Unsharded;
    return;
  }
  send_ = local.scalar_type() == param_dtype_ ? local : local.to(param_dtype_);
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

bool FlatParam::reduce_gradients_async(ProcessGroup* shard_pg, at::ScalarType reduce_dtype, int64_t world_size) {
  torch::NoGradGuard ng;
  wait_reduce();
  // Every rank takes part in the collectives for every unit, whether or not it got gradients here
  // (missing ones count as zeros): deciding locally to skip would put the ranks' collectives out of
  // step. Whether *any* rank had one is settled later, for all units at once (finish_reduce).
  bool any = false;
  for (auto& e : entries_) any = any || e.param.grad().defined();
  const int64_t sn = shard_numel();
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(full_.device());
  reduce_post_ = static_cast<double>(world_size);
  const bool scatter = shard_pg && shard_pg->size() > 1;
  // fp16 (16-mixed) has little range: a sum over the ranks of loss-scaled gradients overflows where
  // the mean would not. As PyTorch's FSDP (its gradient predivide factor), divide by f before the
  // sum and by world / f after it. Other dtypes sum first (one division, less rounding).
  const bool predivide = reduce_dtype == at::kHalf && world_size > 1;
  if (!scatter && !predivide && shard_size_ == 1) {
    // This rank's shard is the whole unit and nothing is divided before the sum: the gradients go
    // straight into the fp32 result (through reduce_dtype's rounding where the collective's input
    // would have rounded them), without a flat copy in reduce_dtype beside it. At world size 1 this
    // is all a reduction does: 6 bytes a parameter moved instead of 20 for bf16 gradients.
    reduce_out_ = empty_large(sn, f32);
    flatten_grads(reduce_out_, reduce_dtype);
  } else {
    torch::Tensor flat = empty_large(padded_, f32.dtype(reduce_dtype));
    flatten_grads(flat, reduce_dtype);
    if (predivide) {
      int64_t f = 1;
      while (world_size % f == 0 && world_size / f > f) f *= 2;
      flat.div_(static_cast<double>(f));
      reduce_post_ /= static_cast<double>(f);
    }
    reduce_out_ = empty_large(sn, f32);
    if (scatter)
      reduce_work_ = shard_pg->reduce_scatter_async(reduce_out_, flat, ReduceOp::Sum);
    else
      reduce_out_.copy_(flat.narrow(0, shard_rank_ * sn, sn));
  }
  reduce_pending_ = true;
  local_any_ = any;
  return any;
}

void FlatParam::flatten_grads(torch::Tensor& flat, at::ScalarType via) {
  // Filled piece by piece, each parameter's gradient freed as soon as it is copied: the buffer's
  // pages are touched as the gradients go, so the unit's gradients are held about once, not twice.
  const bool narrow_via = (via == at::kBFloat16 || via == at::kHalf) && flat.scalar_type() != via;
  for (auto& e : entries_) {
    torch::Tensor dst = flat.narrow(0, e.offset, e.numel);
    const torch::Tensor& g = e.param.grad();
    if (!g.defined())
      dst.zero_();
    else if (narrow_via && g.scalar_type() != via)
      dst.copy_(g.reshape(-1).to(via));  // the rounding a flat buffer in `via` would apply
    else
      dst.copy_(g.reshape(-1));  // exact, or the single rounding `via` would give as well
    e.param.mutable_grad() = torch::Tensor();
  }
  if (flat.numel() > numel_) flat.narrow(0, numel_, flat.numel() - numel_).zero_();
}

void FlatParam::wait_reduce() {
  if (reduce_work_.valid()) reduce_work_.wait();
  reduce_work_ = CollectiveWork();
}

void FlatParam::finish_reduce(ProcessGroup* replicate_pg, bool any_rank) {
  if (!reduce_pending_) return;
  wait_reduce();
  reduce_pending_ = false;
  torch::Tensor g = std::move(reduce_out_);
  reduce_out_ = torch::Tensor();
  if (replicate_pg && replicate_pg->size() > 1) replicate_pg->all_reduce(g, ReduceOp::Sum);
  if (!any_rank) return;  // no rank had a gradient for this unit: the shard gradient stays as it was
  if (reduce_post_ != 1.0) g.div_(reduce_post_);  // a division by one would only move memory
  // The shard's own dtype (bf16 under bf16-true: no fp32 copy anywhere).
  accumulate_shard_grad(g.scalar_type() == shard_.scalar_type() ? g : g.to(shard_.scalar_type()));
}

void FlatParam::reduce_gradients(ProcessGroup* shard_pg, ProcessGroup* replicate_pg, at::ScalarType reduce_dtype,
                                 int64_t world_size) {
  bool any = reduce_gradients_async(shard_pg, reduce_dtype, world_size);
  wait_reduce();
  // One flag, agreed over both groups (the schedule agrees on every unit's flag in one collective).
  torch::Tensor flag = torch::full({1}, any ? 1.0f : 0.0f);
  for (ProcessGroup* pg : {shard_pg, replicate_pg})
    if (pg && pg->size() > 1) pg->all_reduce(flag, ReduceOp::Max);
  finish_reduce(replicate_pg, flag.item<float>() != 0);
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
  // (backward goes on; the schedule waits for the copies before the optimizer reads them). The
  // pinned buffer is allocated once, at its exact size, and reused while nobody else holds it (a
  // .grad someone kept from an earlier step is never overwritten: a new buffer is made then).
  if (shard_grad_.defined()) {
    shard_grad_.add_(g.to(torch::kCPU));
    return;
  }
  if (!grad_host_.defined() || grad_host_.storage().use_count() > 1)
    grad_host_ = host_buffer(shard_numel(), shard_.scalar_type(), /*pinned=*/true, "fsdp.grad");
  shard_grad_ = grad_host_;
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

void FlatParam::release_grads() {
  for (auto& s : slices_) s.view.mutable_grad() = torch::Tensor();
  shard_grad_ = torch::Tensor();
}

torch::Tensor FlatParam::gather_full(ProcessGroup* pg) const {
  torch::Tensor full = torch::empty({padded_}, shard_.options());
  if (pg == nullptr || pg->size() == 1)
    full.copy_(shard_);
  else
    pg->all_gather(full, shard_);
  return full;
}

}  // namespace volt::detail
