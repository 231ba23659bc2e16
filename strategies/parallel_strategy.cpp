#include "volt/strategies/parallel_strategy.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <unistd.h>

#include "volt/core/compat.h"
#include "volt/core/errors.h"

namespace volt {

ParallelStrategy::ParallelStrategy(Precision precision, std::string accelerator, int64_t devices, int64_t num_nodes,
                                   std::chrono::milliseconds timeout, std::string backend)
    : Strategy(std::move(precision), std::move(accelerator)),
      devices_(devices),
      num_nodes_(num_nodes),
      timeout_(timeout),
      backend_(std::move(backend)) {
  // Up front, before any rank is launched: NCCL's collectives run on GPUs only.
  VOLT_CHECK(backend_ != "nccl" || this->accelerator() == "cuda", ConfigError,
             "config key 'trainer.strategy.process_group_backend': nccl runs collectives on GPUs, and this run's "
             "accelerator is '",
             this->accelerator(), "'; use gloo, or leave the key empty (gloo on the CPU, nccl on GPUs)");
}

ParallelStrategy::~ParallelStrategy() {
  mesh_.reset();
  pg_.reset();
  launcher_.reset();  // reaps (and if need be stops) the launched ranks
}

void ParallelStrategy::launch_or_check() {
  const int64_t expected = devices_ * num_nodes_;
  if (env_.source == "none") {
    VOLT_CHECK(env_.node_rank < num_nodes_, ConfigError, "node rank ", env_.node_rank,
               " (--node_rank or NODE_RANK) is outside the job's ", num_nodes_,
               " node(s) (trainer.num_nodes): give each node a rank from 0 to ", num_nodes_ - 1);
    VOLT_CHECK(num_nodes_ == 1 || std::getenv("MASTER_ADDR"), ConfigError, "num_nodes=", num_nodes_,
               " without torchrun or SLURM: run one command per node with --node_rank=N --master_addr=ADDR "
               "--master_port=PORT (or NODE_RANK, MASTER_ADDR, MASTER_PORT), the same on every node but the rank");
    if (expected > 1) {
      LaunchPlan plan;
      plan.devices = devices_;
      plan.num_nodes = num_nodes_;
      plan.node_rank = env_.node_rank;
      plan.master_addr = env_.master_addr;
      plan.port = env_.port_given ? env_.port : 0;
      launcher_ = std::make_unique<Launcher>(plan);
      env_ = launcher_->env();
    } else {
      env_.port = detail::find_free_port();  // a world of one still rendezvouses with itself
    }
    return;
  }
  VOLT_CHECK(env_.world_size == expected, ConfigError, "the ", env_.source,
             " environment says WORLD_SIZE=", env_.world_size, " but devices x num_nodes = ", devices_, " x ",
             num_nodes_, " = ", expected, "; make them agree");
  const int64_t threads = std::max<int64_t>(1, detail::available_cores() / std::max<int64_t>(1, env_.local_world_size));
  if (!std::getenv("OMP_NUM_THREADS")) torch::set_num_threads(static_cast<int>(threads));
}

void ParallelStrategy::setup_environment() {
  if (pg_) return;
  env_ = ClusterEnv::detect();
  if (env_.source == "volt") {
    // A rank launched by volt (a launcher's local rank, or any rank of a restart agent) ends when
    // its launcher dies.
    const char* launcher = std::getenv("VOLT_LAUNCHER_PID");
    if (launcher && std::atoll(launcher) != ::getpid())
      detail::watch_launcher(env_.rank, env_.local_rank, env_.node_rank);
  }
  launch_or_check();
  if (accelerator_ == "cuda") {
    // One GPU per local rank where there are enough; ranks share GPUs otherwise (then only Gloo
    // works: NCCL refuses two ranks on one device).
    const int64_t gpus = static_cast<int64_t>(torch::cuda::device_count());
    device_index_ = gpus > 0 ? env_.local_rank % gpus : 0;
    // The current device too: NCCL stages small CPU tensors (flags, norms) on the current GPU, which
    // would be GPU 0 for every local rank (NCCL: "Duplicate GPU detected").
    compat::set_cuda_device(device_index_);
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
  o.job_config = job_config_;
  o.liveness = LivenessOptions::from_env();
  // A launched rank posts its launcher's death (see [Note: the launcher's death]).
  o.peer_failure = [] { return detail::launcher_death(); };
  if (launcher_) {
    o.peer_failure = [l = launcher_.get()] { return l->failed_rank() >= 0 ? l->failure() : std::string(); };
    // Ending rank 0 ends the job: its ranks go first, stopped ones included.
    o.liveness.on_stuck = [l = launcher_.get()](const std::string& message) {
      l->kill_all();
      detail::end_blocked_process(message);
    };
  }
  pg_ = std::make_unique<ProcessGroup>(env_, o, accelerator_);
  mesh_ = std::make_unique<DeviceMesh>(*pg_, mesh_layout());
  spdlog::info("Initialized process group: rank {} of {} (node {} of {}; {}; mesh {}; from {} environment)", env_.rank,
               env_.world_size, env_.node_rank, env_.num_nodes, pg_->transport(), mesh_->describe(), env_.source);
}

MeshLayout ParallelStrategy::mesh_layout() const { return {{devices_ * num_nodes_}, {"dp"}}; }

DeviceMesh& ParallelStrategy::device_mesh() {
  VOLT_CHECK(mesh_ != nullptr, DistributedError, "device mesh used before setup_environment()");
  return *mesh_;
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

std::vector<torch::Tensor> ParallelStrategy::all_gather_list(const torch::Tensor& t) {
  if (world_size() == 1) return {t};
  return process_group().all_gather_list(t.contiguous());
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

void ParallelStrategy::wait_for_ranks() {
  if (launcher_) launcher_->wait_children();
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
