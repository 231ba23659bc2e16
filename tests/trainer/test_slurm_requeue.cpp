// SLURM auto-requeue (trainer/slurm_requeue.h): the requeue signal on one rank makes every rank finish
// the step and save hpc_ckpt_<N>.ckpt, rank 0 runs `scontrol requeue <job>`, and the requeued job
// resumes from that checkpoint to the same weights as a run never interrupted. Multi-rank, under
// SLURM's variables, with a stand-in scontrol on PATH that records its arguments.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "boring_model.h"
#include "distributed/multi_rank.h"
#include "volt/core/errors.h"
#include "volt/distributed/cluster_env.h"
#include "volt/trainer/trainer_options.h"

using namespace volt;
using namespace volt::testing;
namespace fs = std::filesystem;

namespace {

/// A folder holding an executable `scontrol` that appends its arguments to `<dir>/scontrol.log`.
std::string fake_scontrol(const std::string& dir) {
  const std::string bin = dir + "/bin";
  fs::create_directories(bin);
  std::ofstream(bin + "/scontrol") << "#!/bin/sh\necho \"$@\" >> " << dir << "/scontrol.log\n";
  fs::permissions(bin + "/scontrol", fs::perms::owner_all);
  return bin;
}

/// Two ranks of the worker as SLURM starts them (job 4242), training under `root`.
std::vector<int> run_slurm_job(const std::string& dir, const std::string& root,
                               std::map<std::string, std::string> extra_kv) {
  auto kv = quiet_worker_kv(root);
  kv["batch_size"] = "4";
  kv["trainer.devices"] = "2";
  kv["trainer.strategy"] = "{name: fsdp, timeout: 120}";
  kv["trainer.max_epochs"] = "2";
  kv["trainer.enable_checkpointing"] = "false";
  for (auto& [k, v] : extra_kv) kv[k] = v;
  fs::create_directories(root);
  const int port = volt::detail::find_free_port();
  const std::string path = fake_scontrol(dir) + ":" + std::getenv("PATH");
  std::vector<std::vector<std::string>> argvs;
  std::vector<std::map<std::string, std::string>> envs;
  for (int r = 0; r < 2; ++r) {
    argvs.push_back(worker_argv(root + "/o.pt", kv));
    envs.push_back(slurm_env(r, 2, port, {{"SLURM_JOB_ID", "4242"}, {"SLURM_JOB_NAME", "train"}, {"PATH", path}}));
  }
  return run_processes(argvs, envs, 180, root + "/rank");
}

}  // namespace

TEST_CASE("SLURM requeue signal: every rank saves an hpc checkpoint, rank 0 requeues, the job resumes exactly",
          "[trainer][signals][slurm][multirank]") {
  const std::string dir = temp_dir("slurm-requeue");
  // The reference: the same job never interrupted.
  REQUIRE(run_slurm_job(dir, dir + "/ref", {}) == std::vector<int>{0, 0});
  const WorkerResult ref = read_worker_output(dir + "/ref/o.pt");
  CHECK_FALSE(fs::exists(dir + "/scontrol.log"));

  // Rank 1 alone gets SIGUSR1 before step 5 (of 16): both ranks finish that step and stop.
  const std::string root = dir + "/job";
  const auto codes = run_slurm_job(dir, root, {{"fault_rank", "1"}, {"fault_step", "5"}, {"fault_kind", "sigusr1"}});
  const std::string log0 = read_text(root + "/rank.0.log");
  INFO(log0);
  CHECK(codes == std::vector<int>{1, 1});
  CHECK_THAT(log0, Catch::Contains("at step 6") && Catch::Contains("requeued SLURM job 4242"));
  CHECK_THAT(read_text(root + "/rank.1.log"),
             Catch::Contains("volt: SIGUSR1 received: saving hpc_ckpt and requeueing the SLURM job"));
  CHECK(read_text(dir + "/scontrol.log") == "requeue 4242\n");  // once, by rank 0
  REQUIRE(fs::exists(root + "/hpc_ckpt_1.ckpt"));
  CHECK_FALSE(fs::exists(root + "/o.pt"));

  // The requeued job starts with the same command line: it resumes from hpc_ckpt_1.
  REQUIRE(run_slurm_job(dir, root, {}) == std::vector<int>{0, 0});
  CHECK_THAT(read_text(root + "/rank.0.log"), Catch::Contains("resuming from") && Catch::Contains("hpc_ckpt_1.ckpt"));
  const WorkerResult resumed = read_worker_output(root + "/o.pt");
  CHECK(resumed.global_step == ref.global_step);
  CHECK(max_state_diff(resumed.state, ref.state) == 0.0);  // bitwise
}

TEST_CASE("SLURM requeue options: names, job ids and checkpoint numbering", "[trainer][slurm]") {
  auto yaml = [](const std::string& text) {
    auto o = options_from_yaml<TrainerOptions>(YAML::Load(text), "trainer");
    o.validate();
    return o;
  };
  CHECK(yaml("slurm: {requeue_signal: usr2}").slurm.requeue_signal == RequeueSignal::Usr2);
  CHECK_THROWS_WITH(yaml("slurm: {requeue_signal: SIGKILL}"), Catch::Contains("trainer.slurm.requeue_signal"));
  CHECK_THROWS_WITH(yaml("slurm: {auto_requeue: true, signal: SIGUSR1}"), Catch::Contains("signal"));

  const char* keys[] = {"SLURM_JOB_ID", "SLURM_JOB_NAME", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"};
  std::map<std::string, std::string> saved;
  for (const char* k : keys)
    if (const char* v = std::getenv(k)) saved[k] = v;
  for (const char* k : keys) ::unsetenv(k);
  SLURMOptions o;
  CHECK(volt::detail::slurm_batch_job_id().empty());
  CHECK(o.active_signal() == 0);  // not a SLURM job: SIGUSR1 keeps its default action
  ::setenv("SLURM_JOB_ID", "77", 1);
  ::setenv("SLURM_JOB_NAME", "bash", 1);
  CHECK(volt::detail::slurm_batch_job_id().empty());  // an interactive job
  ::setenv("SLURM_JOB_NAME", "train", 1);
  CHECK(volt::detail::slurm_batch_job_id() == "77");
  CHECK(o.active_signal() == SIGUSR1);
  o.auto_requeue = false;
  CHECK(o.active_signal() == 0);
  ::setenv("SLURM_ARRAY_JOB_ID", "70", 1);
  ::setenv("SLURM_ARRAY_TASK_ID", "3", 1);
  CHECK(volt::detail::slurm_batch_job_id() == "70_3");
  for (const char* k : keys) ::unsetenv(k);
  for (auto& [k, v] : saved) ::setenv(k.c_str(), v.c_str(), 1);

  const std::string dir = temp_dir("hpc-numbering");
  CHECK(volt::detail::hpc_resume_path(dir).empty());
  CHECK(volt::detail::next_hpc_index(dir) == 1);
  std::ofstream(dir + "/hpc_ckpt_2.ckpt") << "x";
  fs::create_directories(dir + "/hpc_ckpt_10.ckpt");  // a sharded checkpoint is a folder
  std::ofstream(dir + "/hpc_ckpt_99.ckpt.tmp.123") << "x";
  std::ofstream(dir + "/hpc_ckpt_x.ckpt") << "x";
  CHECK(volt::detail::hpc_resume_path(dir) == dir + "/hpc_ckpt_10.ckpt");
  CHECK(volt::detail::next_hpc_index(dir) == 11);
}
