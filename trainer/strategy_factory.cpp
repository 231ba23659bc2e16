#include "volt/trainer/strategy_factory.h"

#include <cstdlib>
#include <string>

#include "volt/core/errors.h"
#include "volt/distributed/cluster_env.h"
#include "volt/strategies/ddp.h"
#include "volt/strategies/fsdp/fsdp_strategy.h"

namespace volt {

namespace {
/// A one-process strategy in one of several processes that torchrun or srun started: each would
/// train alone, as a job of one (the parallel strategies check WORLD_SIZE as they launch). Only
/// what a launcher sets for its processes counts: an environment that does not read as a launch
/// (stale or partial variables), a SLURM batch script's own shell (no SLURM_STEP_NUM_TASKS, which
/// srun sets) and an interactive allocation's shell (job name bash or interactive, Lightning's
/// rule) are one process.
void check_not_one_of_many(const TrainerOptions& options) {
  ClusterEnv env;
  try {
    env = ClusterEnv::detect();
  } catch (const DistributedError&) {
    return;
  }
  std::string count = detail::str_cat("WORLD_SIZE=", env.world_size);
  int64_t processes = env.source == "torchrun" ? env.world_size : 1;
  if (env.source == "slurm") {
    const char* job = std::getenv("SLURM_JOB_NAME");
    const std::string job_name = job ? job : "";
    const char* step_tasks = std::getenv("SLURM_STEP_NUM_TASKS");
    if (step_tasks && job_name != "bash" && job_name != "interactive") {
      processes = std::atoll(step_tasks);
      count = detail::str_cat("SLURM_STEP_NUM_TASKS=", processes);
    }
  }
  VOLT_CHECK(processes <= 1, ConfigError, "the ", env.source, " environment says ", count,
             " but devices x num_nodes = ", options.devices, " x ", options.num_nodes,
             " = 1, a one-process strategy: each of the ", processes,
             " processes would train alone. Set trainer.devices (and num_nodes) to match the launcher's processes, "
             "with strategy ddp or fsdp (auto picks ddp), or start one process");
}

std::unique_ptr<Strategy> make(const TrainerOptions& options) {
  Precision precision(options.precision, options.accelerator);
  const int64_t world = options.devices * options.num_nodes;
  const std::string name = options.strategy.resolved(world);
  if (name == "single_device") {
    VOLT_CHECK(world == 1, ConfigError, "config key 'trainer.strategy': single_device runs one process, but devices x ",
               "num_nodes = ", world, "; use strategy: ddp or fsdp");
    check_not_one_of_many(options);
    return std::make_unique<SingleDeviceStrategy>(std::move(precision), options.accelerator);
  }
  if (name == "ddp")
    return std::make_unique<DDPStrategy>(std::move(precision), options.accelerator, options.devices, options.num_nodes,
                                         options.strategy.ddp);
  if (name == "fsdp")
    return std::make_unique<FSDPStrategy>(std::move(precision), options.accelerator, options.devices, options.num_nodes,
                                          options.strategy.fsdp);
  throw ConfigError("config key 'trainer.strategy': strategy '" + name + "' is not available in this build");
}
}  // namespace

std::unique_ptr<Strategy> make_strategy(const TrainerOptions& options) {
  auto s = make(options);
  const bool fsdp = s->name() == "fsdp";
  s->set_activation_checkpointing(
      fsdp ? options.strategy.fsdp.activation_checkpointing_policy : options.strategy.activation_checkpointing_policy,
      "trainer.strategy.activation_checkpointing_policy");
  return s;
}

}  // namespace volt
