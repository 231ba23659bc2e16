#include "volt/strategies/ddp.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include "volt/core/errors.h"
#include "volt/core/grad_hooks.h"
#include "volt/module/lightning_module.h"

namespace volt {

DDPStrategy::DDPStrategy(Precision precision, std::string accelerator, int64_t devices, int64_t num_nodes,
                         DDPOptions options)
    : ParallelStrategy(std::move(precision), std::move(accelerator), devices, num_nodes,
                       std::chrono::seconds(options.timeout), options.process_group_backend),
      options_(options) {
  options_.validate();
}

DDPStrategy::~DDPStrategy() { alive_.reset(); }

void DDPStrategy::setup_module(LightningModule& module) {
  Strategy::setup_module(module);
  broadcast_module(module);
  // Buckets in reverse registration order: the last layers' gradients are ready first.
  std::vector<torch::Tensor> params;
  for (auto& p : module.parameters())
    if (p.requires_grad()) params.push_back(p);
  std::reverse(params.begin(), params.end());
  const int64_t cap = static_cast<int64_t>(options_.bucket_cap_mb * 1024 * 1024);
  buckets_.clear();
  int64_t bytes = 0;
  for (auto& p : params) {
    const int64_t b = p.numel() * p.element_size();
    if (buckets_.empty() || bytes + b > cap || buckets_.back().params.front().scalar_type() != p.scalar_type()) {
      buckets_.emplace_back();
      bytes = 0;
    }
    buckets_.back().params.push_back(p);
    bytes += b;
  }
  if (hooks_installed_) return;
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    for (auto& p : buckets_[bi].params) {
      std::weak_ptr<bool> alive = alive_;
      accumulators_.push_back(detail::add_grad_ready_hook(p, [this, bi, alive] {
        if (!alive.expired()) on_grad_ready(bi);
      }));
    }
  }
  hooks_installed_ = true;
  spdlog::info("DDP: {} parameters in {} bucket(s) of <= {} MB", params.size(), buckets_.size(),
               options_.bucket_cap_mb);
}

void DDPStrategy::on_grad_ready(size_t bi) {
  if (!sync_ || bi >= buckets_.size()) return;
  Bucket& b = buckets_[bi];
  if (--b.pending == 0) launch(bi);
}

void DDPStrategy::launch(size_t bi) {
  Bucket& b = buckets_[bi];
  if (b.launched) return;
  b.launched = true;
  std::vector<torch::Tensor> grads;
  for (auto& p : b.params) {
    // An unused parameter contributes zeros (find_unused_parameters semantics).
    grads.push_back(p.grad().defined() ? p.grad().reshape(-1) : torch::zeros({p.numel()}, p.options()));
  }
  b.flat = torch::cat(grads);
  b.work = process_group().all_reduce_async(b.flat, ReduceOp::Mean);
}

void DDPStrategy::run_backward(LightningModule& module, const torch::Tensor& loss, bool sync_gradients) {
  sync_ = sync_gradients && world_size() > 1;
  for (auto& b : buckets_) {
    b.pending = static_cast<int64_t>(b.params.size());
    b.launched = false;
  }
  loss.backward();
  if (!sync_) return;
  // Buckets whose parameters did not all get a gradient this step (unused parameters) go now.
  for (size_t bi = 0; bi < buckets_.size(); ++bi) launch(bi);
  torch::NoGradGuard ng;
  for (auto& b : buckets_) {
    b.work.wait();
    int64_t off = 0;
    for (auto& p : b.params) {
      auto g = b.flat.narrow(0, off, p.numel()).view(p.sizes());
      if (p.grad().defined())
        p.mutable_grad().copy_(g);
      else
        p.mutable_grad() = g.clone();
      off += p.numel();
    }
    b.flat = torch::Tensor();
  }
  sync_ = true;
}

void DDPStrategy::teardown(LightningModule& module) {
  // Hooks stay on the accumulators but do nothing once buckets are cleared.
  for (auto& b : buckets_) b.work = CollectiveWork();
  buckets_.clear();
  alive_ = std::make_shared<bool>(true);  // hooks installed so far become no-ops
  accumulators_.clear();
  hooks_installed_ = false;
  Strategy::teardown(module);
}

}  // namespace volt
