#include "volt/distributed/process_group.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
// The PyTorch wheel's LibTorch ships no gloo headers: Gloo is then unavailable (NCCL remains)
// unless the build is given some (VOLT_GLOO_INCLUDE_DIR, see scripts/gpu.sh).
#if __has_include(<gloo/algorithm.h>)
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#define VOLT_HAVE_GLOO 1
#else
#define VOLT_HAVE_GLOO 0
#endif
#include <torch/torch.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "volt/core/compat.h"
#include "volt/core/errors.h"
#include "volt/core/large_buffer.h"

#ifdef VOLT_WITH_CUDA
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace volt {

namespace detail {
struct CommClock {
  using Clock = std::chrono::steady_clock;
  std::atomic<int64_t> busy_ns{0};     // added on Gloo's threads as collectives complete
  std::atomic<int64_t> blocked_ns{0};  // added by the issuing thread
  int64_t bytes_base = 0;              // bytes_sent() at the last reset (issuing thread only)
  static int64_t since(Clock::time_point t0) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
  }
};
}  // namespace detail

struct ProcessGroup::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  std::shared_ptr<PeerWatchdog> watchdog;  // shared with the sub-groups; null in a world of one
  c10::intrusive_ptr<compat::C10dBackend> pg;
  std::shared_ptr<detail::CommClock> clock = std::make_shared<detail::CommClock>();
  /// The clock pending work charges: on Gloo only (NCCL's completion is invisible to the host).
  std::shared_ptr<detail::CommClock> work_clock(bool nccl) const { return nccl ? nullptr : clock; }
};

namespace {
/// A synchronous collective: busy and blocked for as long as the scope lasts.
class SyncTimer {
 public:
  explicit SyncTimer(detail::CommClock& c) : c_(c), t0_(detail::CommClock::Clock::now()) {}
  ~SyncTimer() {
    const int64_t ns = detail::CommClock::since(t0_);
    c_.busy_ns += ns;
    c_.blocked_ns += ns;
  }
  SyncTimer(const SyncTimer&) = delete;
  SyncTimer& operator=(const SyncTimer&) = delete;

 private:
  detail::CommClock& c_;
  detail::CommClock::Clock::time_point t0_;
};
}  // namespace

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

const char* const kJoinedKey = "volt_joined";  // see wait_for_ranks

bool is_half(const torch::Tensor& t) { return t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf; }

// Data movement only: bf16 travels as fp16 bits on Gloo (which rejects bf16).
torch::Tensor as_wire(const torch::Tensor& t) { return t.scalar_type() == at::kBFloat16 ? t.view(at::kHalf) : t; }

c10::intrusive_ptr<compat::C10dBackend> make_gloo(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                  std::chrono::milliseconds timeout, const std::string& host) {
#if !VOLT_HAVE_GLOO
  throw DistributedError("the gloo backend is not available in this build (LibTorch without gloo headers); use nccl");
#else
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
  opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(host));
  opts->threads = 2;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, opts);
#endif
}

c10::intrusive_ptr<compat::C10dBackend> make_backend(const std::string& backend,
                                                     const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                     std::chrono::milliseconds timeout, const std::string& host) {
#ifdef VOLT_WITH_CUDA
  if (backend == "nccl") {
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = timeout;
    return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, opts);
  }
#endif
  return make_gloo(store, rank, size, timeout, host);
}

#ifdef VOLT_WITH_CUDA
constexpr bool kHaveNccl = true;
#else
constexpr bool kHaveNccl = false;
#endif

}  // namespace

CollectiveWork::CollectiveWork(c10::intrusive_ptr<c10d::Work> work, std::string what, std::function<void()> finish,
                               std::shared_ptr<PeerWatchdog> watchdog, std::shared_ptr<detail::CommClock> clock)
    : work_(std::move(work)),
      what_(std::move(what)),
      finish_(std::move(finish)),
      watchdog_(std::move(watchdog)),
      clock_(std::move(clock)) {
  if (!clock_ || !work_) return;
  // Completion is seen on the backend's thread, whenever the issuing thread looks (or not).
  const auto t0 = detail::CommClock::Clock::now();
  try {
    work_->getFuture()->addCallback(
        [c = clock_, t0](c10::ivalue::Future&) { c->busy_ns += detail::CommClock::since(t0); });
  } catch (const std::exception&) {
    clock_.reset();  // a backend without futures: not timed
  }
}

namespace {
// Why a collective failed: the peer failure the watchdog knows of (waiting for its judgement, as a
// dead peer breaks the connection before its heartbeat is missed), else the usual suspects.
std::string failure_cause(const std::shared_ptr<PeerWatchdog>& w) {
  if (w) {
    const std::string f = w->await_failure();
    if (!f.empty()) return ". Cause: " + f;
  }
  return ". A peer rank probably died or stalled past the timeout; check the other ranks' logs.";
}
}  // namespace

void CollectiveWork::wait() {
  const auto t0 = detail::CommClock::Clock::now();
  struct Charge {  // the wait, and the finishing step (a local sum on Gloo) as communication time
    detail::CommClock* c;
    detail::CommClock::Clock::time_point t0;
    ~Charge() {
      if (!c) return;
      const int64_t ns = detail::CommClock::since(t0);
      c->blocked_ns += ns;
    }
  } charge{clock_.get(), t0};
  try {
    if (watchdog_ && work_ && watchdog_->failed()) watchdog_->check(what_);
    PeerWatchdog::Blocked blocked(work_ ? watchdog_.get() : nullptr, what_);
    if (work_) work_->wait();
  } catch (const DistributedError&) {
    work_.reset();
    finish_ = nullptr;
    throw;
  } catch (const std::exception& e) {
    work_.reset();
    finish_ = nullptr;
    std::string msg = e.what();
    throw DistributedError(what_ + " failed: " + msg.substr(0, msg.find('\n')) + failure_cause(watchdog_));
  }
  work_.reset();
  if (finish_) {
    auto f = std::move(finish_);
    finish_ = nullptr;
    const auto f0 = detail::CommClock::Clock::now();
    f();
    if (clock_) clock_->busy_ns += detail::CommClock::since(f0);
  }
}

ProcessGroup::ProcessGroup(const ClusterEnv& env, ProcessGroupOptions options, const std::string& device_type)
    : impl_(std::make_unique<Impl>()), rank_(env.rank), size_(env.world_size), timeout_(options.timeout) {
  backend_name_ = options.backend.empty() ? (device_type == "cuda" ? "nccl" : "gloo") : options.backend;
  VOLT_CHECK(backend_name_ == "gloo" || (kHaveNccl && backend_name_ == "nccl"), DistributedError,
             "process group backend '", backend_name_, "' is not available in this build",
             kHaveNccl ? "" : " (CPU LibTorch)", "; use gloo");
  nccl_ = backend_name_ == "nccl";
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(env.port);
  so.isServer = env.rank == 0;
  so.numWorkers = static_cast<size_t>(env.world_size);
  // Rank 0 waits for the others itself (wait_for_ranks) rather than inside TCPStore, so that a rank
  // that died before joining ends the wait at once instead of after the whole timeout.
  so.waitWorkers = !(env.rank == 0 && options.peer_failure);
  so.timeout = options.timeout;
  try {
    impl_->store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
    if (size_ > 1) {
      // Heartbeats from here on: a rank that dies between joining and Gloo's connect is seen too.
      LivenessOptions live = options.liveness;
      live.peer_failure = options.peer_failure;
      live.timeout = std::min(live.timeout, timeout_);
      impl_->watchdog = std::make_shared<PeerWatchdog>(env.master_addr, env.port, rank_, size_, std::move(live));
    }
    impl_->store->add(kJoinedKey, 1);  // every rank, whoever waits for the count
    if (!so.waitWorkers) wait_for_ranks(options.peer_failure);
    const std::string host = (env.master_addr == "127.0.0.1" || env.master_addr == "localhost") ? "127.0.0.1" : "";
    auto blocked = enter("rendezvous (connecting " + backend_name_ + ")");
    impl_->pg = make_backend(backend_name_, impl_->store, static_cast<int>(rank_), static_cast<int>(size_), timeout_,
                             host.empty() ? std::string("0.0.0.0") : host);
  } catch (const std::exception& e) {
    throw DistributedError(detail::str_cat("rendezvous failed on rank ", rank_, " of ", size_, " at ", env.master_addr,
                                           ":", env.port, ": ", e.what()));
  }
}

void ProcessGroup::wait_for_ranks(const std::function<std::string()>& peer_failure) {
  // Every rank adds 1 to kJoinedKey once its store is connected.
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const int64_t joined = impl_->store->add(kJoinedKey, 0) - 1;  // the others
    if (joined >= size_ - 1) break;
    std::string failure = peer_failure ? peer_failure() : std::string();
    if (failure.empty() && impl_->watchdog) failure = impl_->watchdog->failure();
    VOLT_CHECK(failure.empty(), DistributedError, "rendezvous: ", failure, " before joining (", joined, " of ",
               size_ - 1, " other ranks had joined); stopping");
    VOLT_CHECK(std::chrono::steady_clock::now() - start < timeout_, DistributedError, "rendezvous: only ", joined,
               " of ", size_ - 1, " other ranks joined within the timeout (", timeout_.count() / 1000, " s)");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
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
  try {
    auto blocked = enter("creating sub-group '" + tag + "'");
    impl_->pg = make_backend(backend_name_, impl_->store, static_cast<int>(rank_), static_cast<int>(size_), timeout_,
                             "127.0.0.1");
  } catch (const std::exception& e) {
    throw DistributedError(detail::str_cat("creating sub-group '", tag, "' failed on rank ", me, ": ", e.what()));
  }
}

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
                         failure_cause(impl_->watchdog));
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
  return all_gather_gloo(flat, shard);
}

CollectiveWork ProcessGroup::all_gather_gloo(torch::Tensor& flat, const torch::Tensor& shard) {
  // [Note: Gloo all-gather as an all-to-all] Gloo's list all-gather copies the input into a flat
  // buffer, gathers into a second full-size buffer and copies that out again: on loopback it took
  // 60-66 ms for a 68 MB unit at two ranks, where an all-reduce of the same 68 MB took 38 ms
  // (LibTorch 1.13, one thread per rank). An all-to-all writes straight into the flat output. With
  // two ranks each sends its shard to the other (a split of 0 to itself) and copies its own: no
  // extra buffer, 16-19 ms. With more ranks the input is the shard repeated once per rank (a
  // transient of the unit's size, as Gloo's own buffer was, mapped on huge pages): bench_fsdp's
  // FULL_SHARD step at 4 ranks took 3.00-3.14 s against 3.59-3.61 s with the list all-gather.
  const int64_t n = size_, r = rank_, sn = shard.numel();
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
    in = detail::empty_large(n * sn, one.options());
    in.view({n, sn}).copy_(one.view({1, sn}).expand({n, sn}));
    out = whole;
  }
  bytes_sent_ += sn * one.element_size() * (n - 1);
  try {
    return CollectiveWork(impl_->pg->alltoall_base(out, in, out_splits, in_splits), describe("all_gather (all_to_all)"),
                          nullptr, impl_->watchdog, impl_->work_clock(nccl_));
  } catch (const std::exception& e) {
    fail("all_gather (all_to_all)", e);
  }
}

void ProcessGroup::all_gather(torch::Tensor& flat, const torch::Tensor& shard) { all_gather_async(flat, shard).wait(); }

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
  // all-to-all of the other ranks' chunks: chunk j of every rank lands on rank j, and each rank keeps
  // its own chunk where it is (a split of 0 to itself), so the receive buffer is (N-1)/N of the
  // input rather than all of it. When waited on, the N chunks are summed in rank order in fp32.
  const int64_t n = size_, r = rank_, sn = shard.numel();
  torch::Tensor whole = as_wire(full.contiguous().view(-1));
  torch::Tensor in;
  if (r == 0)
    in = whole.narrow(0, sn, (n - 1) * sn);
  else if (r == n - 1)
    in = whole.narrow(0, 0, (n - 1) * sn);
  else
    in = torch::cat({whole.narrow(0, 0, r * sn), whole.narrow(0, (r + 1) * sn, (n - 1 - r) * sn)});
  torch::Tensor out = detail::empty_large((n - 1) * sn, in.options());
  std::vector<int64_t> out_splits(static_cast<size_t>(n), sn);
  out_splits[static_cast<size_t>(r)] = 0;
  std::vector<int64_t> in_splits = out_splits;  // two vectors: Gloo's alltoall_base moves from each
  bytes_sent_ += sn * in.element_size() * (n - 1);
  const bool bf16 = full.scalar_type() == at::kBFloat16;
  try {
    auto work = impl_->pg->alltoall_base(out, in, out_splits, in_splits);
    return CollectiveWork(
        work, describe("reduce_scatter (all_to_all)"),
        [target, out, in, whole, bf16, n, r, op]() mutable {
          in = torch::Tensor();  // the input may go as soon as the exchange is done
          sum_chunks(target, out, whole, n, r, bf16, op);
        },
        impl_->watchdog, impl_->work_clock(nccl_));
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
