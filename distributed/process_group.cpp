#include "volt/distributed/process_group.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "volt/core/compat.h"
#include "volt/core/errors.h"
#include "volt/distributed/backend.h"
#include "volt/distributed/gloo_collectives.h"
#include "volt/distributed/network_interface.h"
#include "volt/distributed/rendezvous.h"

namespace volt {

struct ProcessGroup::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  std::shared_ptr<PeerWatchdog> watchdog;  // shared with the sub-groups; null in a world of one
  c10::intrusive_ptr<compat::C10dBackend> pg;
  std::shared_ptr<detail::CommClock> clock = std::make_shared<detail::CommClock>();
  /// The network device, chosen by the world group and shared with its sub-groups.
  std::shared_ptr<detail::BackendDevices> devices;
  /// The clock pending work charges: on Gloo only (NCCL's completion is invisible to the host).
  std::shared_ptr<detail::CommClock> work_clock(bool nccl) const { return nccl ? nullptr : clock; }
};

namespace {

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Mean:
      return c10d::ReduceOp::SUM;
    case ReduceOp::Max:
      return c10d::ReduceOp::MAX;
    case ReduceOp::Min:
      return c10d::ReduceOp::MIN;
  }
  return c10d::ReduceOp::SUM;
}

bool is_half(const torch::Tensor& t) { return t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf; }

}  // namespace

using detail::as_wire;
using detail::SyncTimer;

ProcessGroup::ProcessGroup(const ClusterEnv& env, ProcessGroupOptions options, const std::string& device_type)
    : impl_(std::make_unique<Impl>()), rank_(env.rank), size_(env.world_size), timeout_(options.timeout) {
  backend_name_ = options.backend.empty() ? (device_type == "cuda" ? "nccl" : "gloo") : options.backend;
  VOLT_CHECK((backend_name_ == "gloo" && detail::have_gloo()) || (backend_name_ == "nccl" && detail::have_nccl()),
             DistributedError, "process group backend '", backend_name_, "' is not available in this build",
             backend_name_ == "nccl" ? " (CPU LibTorch); use gloo"
                                     : " (a CUDA build without gloo's headers: CPU runs and ranks that share a GPU "
                                       "need it; rebuild with VOLT_GLOO_INCLUDE_DIR, as scripts/gpu.sh does)");
  // Before the store and the rendezvous, which would otherwise wait for ranks that fail the same way.
  VOLT_CHECK(backend_name_ != "nccl" || torch::cuda::device_count() > 0, DistributedError,
             "process group backend 'nccl' needs a GPU, and this process sees none (CUDA_VISIBLE_DEVICES='",
             std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "<unset>",
             "'); use gloo on the CPU");
  nccl_ = backend_name_ == "nccl";
  try {
    // A host with no route to the master, or without the GLOO_SOCKET_IFNAME it was given, fails at
    // once, naming its interfaces: before the store, so the message does not wait on a master that
    // may have failed the same way.
    detail::check_route(env.master_addr);
    if (backend_name_ == "gloo") {
      const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
      detail::choose_device(env.master_addr, ifname ? ifname : "");
    }
    impl_->store = detail::connect_store(env, timeout_);
    if (size_ > 1) {
      // Heartbeats from here on: a rank that dies between joining and Gloo's connect is seen too.
      LivenessOptions live = options.liveness;
      live.peer_failure = options.peer_failure;
      live.timeout = std::min(live.timeout, timeout_);
      impl_->watchdog = std::make_shared<PeerWatchdog>(env.master_addr, env.port, rank_, size_, std::move(live));
    }
    try {
      impl_->devices = detail::open_devices(backend_name_, env.master_addr);
    } catch (const std::exception& e) {
      // The others learn of it through the store instead of waiting for this rank.
      const std::string what = e.what();
      report_failure(detail::str_cat("rank ", rank_, " (node ", env.node_rank,
                                     ") failed before joining: ", what.substr(0, what.find('\n'))));
      throw;
    }
    detail::agree_on_world(*impl_->store, env, detail::local_address(*impl_->devices), timeout_, options.peer_failure,
                           impl_->watchdog.get(), options.job_config);
    if (impl_->watchdog) impl_->watchdog->set_layout(detail::read_layout(*impl_->store, size_));
    auto blocked = enter("rendezvous (connecting " + backend_name_ + ")");
    impl_->pg = detail::make_backend(backend_name_, impl_->store, static_cast<int>(rank_), static_cast<int>(size_),
                                     timeout_, *impl_->devices);
  } catch (const ConfigError&) {
    throw;  // ranks started with different configs: exit code 2, no restart
  } catch (const std::exception& e) {
    throw DistributedError(detail::str_cat("rendezvous failed on rank ", rank_, " of ", size_, " at ", env.master_addr,
                                           ":", env.port, ": ", e.what()));
  }
}

ProcessGroup::ProcessGroup(ProcessGroup& parent, const std::vector<int64_t>& ranks, const std::string& tag)
    : impl_(std::make_unique<Impl>()),
      ranks_(ranks),
      backend_name_(parent.backend_name_),
      nccl_(parent.nccl_),
      tag_(tag),
      timeout_(parent.timeout_) {
  const int64_t me = parent.global_rank(parent.rank());
  auto it = std::find(ranks.begin(), ranks.end(), me);
  VOLT_CHECK(it != ranks.end(), DistributedError, "rank ", me, " is not in sub-group '", tag, "'");
  rank_ = it - ranks.begin();
  size_ = static_cast<int64_t>(ranks.size());
  impl_->store = c10::make_intrusive<c10d::PrefixStore>("volt/" + tag, parent.impl_->store);
  impl_->watchdog = parent.impl_->watchdog;
  impl_->devices = parent.impl_->devices;
  try {
    auto blocked = enter("creating sub-group '" + tag + "'");
    impl_->pg = detail::make_backend(backend_name_, impl_->store, static_cast<int>(rank_), static_cast<int>(size_),
                                     timeout_, *impl_->devices);
  } catch (const std::exception& e) {
    throw DistributedError(detail::str_cat("creating sub-group '", tag, "' failed on rank ", me, ": ", e.what()));
  }
}

std::string ProcessGroup::transport() const { return detail::describe(*impl_->devices); }

ProcessGroup::~ProcessGroup() {
  // The backend first (it may still use the store), then the watchdog says goodbye, then the store.
  impl_->pg.reset();
  impl_->watchdog.reset();
}

void ProcessGroup::check_peers(const char* collective) const {
  // The description is built only for the error: this runs before every collective.
  if (impl_->watchdog && impl_->watchdog->failed()) impl_->watchdog->check(describe(collective));
}

PeerWatchdog::Blocked ProcessGroup::enter(const std::string& collective) const {
  std::string what = describe(collective);
  if (impl_->watchdog) impl_->watchdog->check(what);
  return PeerWatchdog::Blocked(impl_->watchdog.get(), std::move(what));
}

void ProcessGroup::report_failure(const std::string& what) {
  if (impl_->watchdog) impl_->watchdog->report(what);
}

std::string ProcessGroup::describe(const std::string& collective) const {
  return detail::str_cat(collective, " on rank ", global_rank(rank_), " (group '", tag_, "', size ", size_, ")");
}

void ProcessGroup::fail(const std::string& collective, const std::exception& e) const {
  if (auto* d = dynamic_cast<const DistributedError*>(&e)) throw *d;
  std::string msg = e.what();
  throw DistributedError(describe(collective) + " failed: " + msg.substr(0, msg.find('\n')) +
                         detail::failure_cause(impl_->watchdog));
}

CollectiveWork ProcessGroup::all_reduce_async(torch::Tensor& t, ReduceOp op) {
  VOLT_CHECK(op != ReduceOp::Mean || at::isFloatingType(t.scalar_type()), DistributedError, describe("all_reduce"),
             ": Mean of a ", t.scalar_type(), " tensor would truncate; reduce with Sum and divide in a floating type");
  if (size_ == 1) return {};
  check_peers("all_reduce");
  // Gloo reduces half types in fp32; NCCL takes them (and AVG) natively but only CUDA tensors.
  torch::Tensor wire = (!nccl_ && is_half(t)) ? t.to(at::kFloat) : on_wire_device(t);
  if (!wire.is_contiguous()) wire = wire.contiguous();
  std::vector<torch::Tensor> v{wire};
  c10d::AllreduceOptions o;
  o.reduceOp = to_c10d(op);
  if (nccl_ && op == ReduceOp::Mean) {
    o.reduceOp = c10d::ReduceOp::AVG;
    op = ReduceOp::Sum;  // nothing left to divide
  }
  bytes_sent_ += 2 * wire.numel() * wire.element_size() * (size_ - 1) / size_;
  try {
    auto work = impl_->pg->allreduce(v, o);
    torch::Tensor target = t;
    const int64_t n = size_;
    return CollectiveWork(
        work, describe("all_reduce"),
        [target, wire, op, n]() mutable {
          if (op == ReduceOp::Mean) wire.div_(static_cast<double>(n));
          if (!wire.is_same(target)) {
            at::AutoDispatchBelowADInplaceOrView guard;
            target.copy_(wire);
          }
        },
        impl_->watchdog, impl_->work_clock(nccl_));
  } catch (const std::exception& e) {
    fail("all_reduce", e);
  }
}

void ProcessGroup::all_reduce(torch::Tensor& t, ReduceOp op) { all_reduce_async(t, op).wait(); }

CollectiveWork ProcessGroup::all_gather_async(torch::Tensor& flat, const torch::Tensor& shard) {
  VOLT_CHECK(flat.numel() == shard.numel() * size_, DistributedError, describe("all_gather"), ": output has ",
             flat.numel(), " elements, expected ", shard.numel() * size_);
  if (size_ == 1) {
    at::AutoDispatchBelowADInplaceOrView guard;
    flat.view(-1).copy_(shard.view(-1));
    return {};
  }
  check_peers("all_gather");
  if (nccl_) {
    torch::Tensor out = on_wire_device(flat).view(-1);
    torch::Tensor in = on_wire_device(shard).contiguous().view(-1);
    bytes_sent_ += shard.numel() * shard.element_size() * (size_ - 1);
    try {
      auto work = impl_->pg->_allgather_base(out, in);
      if (out.is_same(flat) || out.data_ptr() == flat.data_ptr())
        return CollectiveWork(work, describe("all_gather"), nullptr, impl_->watchdog, impl_->work_clock(nccl_));
      torch::Tensor target = flat;
      return CollectiveWork(
          work, describe("all_gather"),
          [target, out]() mutable {
            at::AutoDispatchBelowADInplaceOrView guard;
            target.view(-1).copy_(out);
          },
          impl_->watchdog, impl_->work_clock(nccl_));
    } catch (const std::exception& e) {
      fail("all_gather", e);
    }
  }
  try {
    auto x = detail::gloo_all_gather(*impl_->pg, flat, shard, rank_, size_);
    bytes_sent_ += x.bytes_sent;
    return CollectiveWork(x.work, describe("all_gather (all_to_all)"), nullptr, impl_->watchdog,
                          impl_->work_clock(nccl_));
  } catch (const std::exception& e) {
    fail("all_gather (all_to_all)", e);
  }
}

void ProcessGroup::all_gather(torch::Tensor& flat, const torch::Tensor& shard) { all_gather_async(flat, shard).wait(); }

void ProcessGroup::reduce_scatter(torch::Tensor& shard, const torch::Tensor& full, ReduceOp op) {
  reduce_scatter_async(shard, full, op).wait();
}

CollectiveWork ProcessGroup::reduce_scatter_async(torch::Tensor& shard, const torch::Tensor& full, ReduceOp op) {
  VOLT_CHECK(full.numel() == shard.numel() * size_, DistributedError, describe("reduce_scatter"), ": input has ",
             full.numel(), " elements, expected ", shard.numel() * size_);
  VOLT_CHECK(op == ReduceOp::Sum || op == ReduceOp::Mean, DistributedError, describe("reduce_scatter"),
             ": only sum and mean are supported");
  at::AutoDispatchBelowADInplaceOrView guard;
  if (size_ == 1) {
    shard.view(-1).copy_(full.view(-1));
    return {};
  }
  check_peers("reduce_scatter");
  torch::Tensor target = shard;
  if (nccl_) {
    torch::Tensor in = on_wire_device(full).contiguous().view(-1);
    torch::Tensor out = torch::empty({shard.numel()}, in.options());
    c10d::ReduceScatterOptions o;
    o.reduceOp = op == ReduceOp::Mean ? c10d::ReduceOp(c10d::ReduceOp::AVG) : to_c10d(op);
    bytes_sent_ += shard.numel() * in.element_size() * (size_ - 1);  // the wire dtype, not the shard's
    try {
      auto work = impl_->pg->_reduce_scatter_base(out, in, o);
      return CollectiveWork(
          work, describe("reduce_scatter"),
          [target, out, in]() mutable {
            at::AutoDispatchBelowADInplaceOrView g;
            target.view(-1).copy_(out);
          },
          impl_->watchdog, impl_->work_clock(nccl_));
    } catch (const std::exception& e) {
      fail("reduce_scatter", e);
    }
  }
  try {
    auto x = detail::gloo_reduce_scatter(*impl_->pg, target, full, op, rank_, size_);
    bytes_sent_ += x.bytes_sent;
    return CollectiveWork(x.work, describe("reduce_scatter (all_to_all)"), std::move(x.finish), impl_->watchdog,
                          impl_->work_clock(nccl_));
  } catch (const std::exception& e) {
    fail("reduce_scatter (all_to_all)", e);
  }
}

void ProcessGroup::broadcast(torch::Tensor& t, int64_t src) {
  if (size_ == 1) return;
  torch::Tensor wire = nccl_ ? on_wire_device(t).contiguous() : as_wire(t.is_contiguous() ? t : t.contiguous());
  std::vector<torch::Tensor> v{wire};
  c10d::BroadcastOptions o;
  o.rootRank = src;
  if (rank_ == src) bytes_sent_ += wire.numel() * wire.element_size();
  auto blocked = enter("broadcast");
  SyncTimer timer(*impl_->clock);
  try {
    impl_->pg->broadcast(v, o)->wait();
  } catch (const std::exception& e) {
    fail("broadcast", e);
  }
  if (wire.data_ptr() != t.data_ptr()) {
    at::AutoDispatchBelowADInplaceOrView guard;
    t.copy_(wire.scalar_type() == t.scalar_type() ? wire : wire.view(t.scalar_type()));
  }
}

void ProcessGroup::barrier(const std::string& name) {
  if (size_ == 1) return;
  // A tiny all-reduce: unlike Gloo's barrier it reports a dead peer like any collective.
  torch::Tensor t = on_wire_device(torch::zeros({1}));
  auto blocked = enter("barrier '" + name + "'");
  SyncTimer timer(*impl_->clock);
  try {
    std::vector<torch::Tensor> v{t};
    impl_->pg->allreduce(v)->wait();
  } catch (const std::exception& e) {
    fail("barrier '" + name + "'", e);
  }
}

torch::Tensor ProcessGroup::on_wire_device(const torch::Tensor& t) const {
  // NCCL moves only CUDA tensors: small CPU metadata (norms, flags, counts) is staged through the GPU.
  if (nccl_ && !t.is_cuda()) return t.to(torch::kCUDA);
  return t;
}

std::vector<torch::Tensor> ProcessGroup::all_gather_list(const torch::Tensor& t) {
  torch::Tensor flat = torch::empty({size_ * t.numel()}, t.options());
  all_gather(flat, t.contiguous().view(-1));
  std::vector<torch::Tensor> out;
  for (auto& c : flat.chunk(size_)) out.push_back(c.view(t.sizes()));
  return out;
}

CommStats ProcessGroup::comm_stats() const {
  CommStats st;
  st.bytes_sent = bytes_sent_ - impl_->clock->bytes_base;
  st.busy_seconds = static_cast<double>(impl_->clock->busy_ns.load()) * 1e-9;
  st.blocked_seconds = static_cast<double>(impl_->clock->blocked_ns.load()) * 1e-9;
  return st;
}

void ProcessGroup::reset_comm_stats() {
  impl_->clock->busy_ns = 0;
  impl_->clock->blocked_ns = 0;
  impl_->clock->bytes_base = bytes_sent_;
}

}  // namespace volt
