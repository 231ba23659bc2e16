#include "volt/strategies/parallel_strategy.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include "volt/core/errors.h"

namespace volt {

ParallelStrategy::ParallelStrategy(Precision precision, std::string accelerator, int64_t devices, int64_t num_nodes,
                                   std::chrono::milliseconds timeout, std::string backend)
    : Strategy(std::move(precision), std::move(accelerator)),
      devices_(devices),
      num_nodes_(num_nodes),
      timeout_(timeout),
      backend_(std::move(backend)) {}

ParallelStrategy::~ParallelStrategy() {
  pg_.reset();
  launcher_.reset();  // reaps (and if need be stops) the launched ranks
}

void ParallelStrategy::setup_environment() {
  if (pg_) return;
  env_ = ClusterEnv::detect();
  if (env_.source == "volt" && env_.rank > 0) detail::watch_launcher(env_.rank);
  const int64_t expected = devices_ * num_nodes_;
  if (env_.source == "none") {
    VOLT_CHECK(num_nodes_ == 1, DistributedError, "num_nodes=", num_nodes_,
               " needs a cluster launcher (torchrun or SLURM) to start the other nodes");
    if (expected > 1) {
      launcher_ = std::make_unique<Launcher>(expected);
      env_ = launcher_->env();
    } else {
      env_.port = detail::find_free_port();  // a world of one still rendezvouses with itself
    }
  } else {
    VOLT_CHECK(env_.world_size == expected, DistributedError, "the ", env_.source,
               " environment says WORLD_SIZE=", env_.world_size, " but devices x num_nodes = ", devices_, " x ",
               num_nodes_, " = ", expected, "; make them agree");
    const int64_t threads =
        std::max<int64_t>(1, detail::available_cores() / std::max<int64_t>(1, env_.local_world_size));
    if (!std::getenv("OMP_NUM_THREADS")) torch::set_num_threads(static_cast<int>(threads));
  }
  if (accelerator_ == "cuda") {
    // One GPU per local rank where there are enough; ranks share GPUs otherwise (then only Gloo
    // works: NCCL refuses two ranks on one device).
    const int64_t gpus = static_cast<int64_t>(torch::cuda::device_count());
    device_index_ = gpus > 0 ? env_.local_rank % gpus : 0;
    VOLT_CHECK(!(backend_ == "nccl" && env_.local_world_size > gpus), DistributedError,
               "process_group_backend "
               "'nccl' needs one GPU per rank, but ",
               env_.local_world_size, " ranks share ", gpus,
               " GPU(s) on this node; use process_group_backend: gloo or fewer devices");
  }
  ProcessGroupOptions o;
  o.backend = backend_;
  if (o.backend.empty() && accelerator_ == "cuda" &&
      env_.local_world_size > static_cast<int64_t>(torch::cuda::device_count()))
    o.backend = "gloo";
  o.timeout = timeout_;
  o.liveness = LivenessOptions::from_env();
  if (launcher_) {
    o.peer_failure = [l = launcher_.get()] { return l->failed_rank() >= 0 ? l->failure() : std::string(); };
    // Ending rank 0 ends the job: its ranks go first, stopped ones included.
    o.liveness.on_stuck = [l = launcher_.get()](const std::string& message) {
      l->kill_all();
      detail::end_blocked_process(message);
    };
  }
  pg_ = std::make_unique<ProcessGroup>(env_, o, accelerator_);
  spdlog::info("Initialized process group: rank {} of {} ({} backend, from {} environment)", env_.rank, env_.world_size,
               pg_->backend(), env_.source);
}

ProcessGroup& ParallelStrategy::process_group() {
  VOLT_CHECK(pg_ != nullptr, DistributedError, "process group used before setup_environment()");
  return *pg_;
}

void ParallelStrategy::setup_dataloader(DataLoader& loader, bool pad) {
  loader.set_distributed(env_.rank, env_.world_size, pad);
}

torch::Tensor ParallelStrategy::all_reduce(const torch::Tensor& t, ReduceOp op) {
  torch::Tensor c = t.detach().clone();
  process_group().all_reduce(c, op);
  return c;
}

torch::Tensor ParallelStrategy::broadcast(const torch::Tensor& t, int64_t src) {
  torch::Tensor c = t.detach().clone();
  process_group().broadcast(c, src);
  return c;
}

void ParallelStrategy::barrier(const std::string& name) { process_group().barrier(name); }

void ParallelStrategy::finalize() {
  // Non-blocking: the launched ranks may still have work after this call (another fit, a test);
  // the launcher's destructor waits for them to finish.
  if (launcher_ && launcher_->failed_rank() >= 0) throw DistributedError(launcher_->failure());
}

void ParallelStrategy::on_exception(const std::exception& error) {
  if (!pg_ || pg_->size() < 2) return;
  const std::string what = error.what();
  try {
    pg_->report_failure(detail::str_cat("rank ", env_.rank, " failed: ", what.substr(0, what.find('\n'))));
  } catch (const std::exception&) {  // the original error is the one to report
  }
}

void ParallelStrategy::broadcast_module(torch::nn::Module& module) {
  torch::NoGradGuard ng;
  for (auto& p : module.parameters()) {
    torch::Tensor d = p.detach();
    process_group().broadcast(d, 0);
  }
  for (auto& b : module.buffers()) {
    torch::Tensor d = b.detach();
    process_group().broadcast(d, 0);
  }
}

}  // namespace volt
