#pragma once
// Shared helpers for multi-rank tests: run the test worker as real processes and read its output.
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "boring_model.h"
#include "volt/distributed/cluster_env.h"
#include "volt/trainer/trainer.h"

namespace volt::testing {

struct WorkerResult {
  std::map<std::string, torch::Tensor> state;
  std::map<std::string, torch::Tensor> init_state;  // with record_init: the state when training started
  std::vector<double> losses;
  int64_t global_step = 0;
  double val_loss = -1;       // the last validation's val_loss (-1 when none ran)
  double all_gather_ok = -1;  // with all_gather_probe: 1 when every rank's all_gather was right
  int64_t nonroot_unsharded_after_forward = -1, root_unsharded_after_forward = -1, optimizer_numel = -1;
  std::vector<int64_t> shard_numels, padded, numels;
  // Rank 0's exact-size host buffers of shards (cpu_offload), and optimizer_in_backward's last sync
  // backward: units stepped, and how many while autograd ran (-1: not recorded).
  int64_t host_shard_buffers = -1, host_shard_requested = -1, host_shard_held = -1;
  int64_t host_grad_buffers = -1, host_grad_requested = -1;
  int64_t backward_units_stepped = -1, backward_units_during_autograd = -1;
};

inline WorkerResult read_worker_output(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  WorkerResult r;
  if (bytes.empty()) return r;
  auto d = torch::pickle_load(bytes).toGenericDict();
  for (const auto& kv : d.at("state_dict").toGenericDict()) r.state[kv.key().toStringRef()] = kv.value().toTensor();
  if (d.contains("init_state"))
    for (const auto& kv : d.at("init_state").toGenericDict())
      r.init_state[kv.key().toStringRef()] = kv.value().toTensor();
  auto l = d.at("losses").toTensor();
  for (int64_t i = 0; i < l.numel(); ++i) r.losses.push_back(l[i].item<double>());
  r.global_step = d.at("global_step").toInt();
  if (d.contains("val_loss")) r.val_loss = d.at("val_loss").toDouble();
  if (d.contains("all_gather_ok")) r.all_gather_ok = d.at("all_gather_ok").toDouble();
  if (d.contains("optimizer_numel")) {
    r.nonroot_unsharded_after_forward = d.at("nonroot_unsharded_after_forward").toInt();
    r.root_unsharded_after_forward = d.at("root_unsharded_after_forward").toInt();
    r.optimizer_numel = d.at("optimizer_numel").toInt();
    auto vec = [](const torch::Tensor& t) {
      std::vector<int64_t> v;
      for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t[i].item<int64_t>());
      return v;
    };
    r.shard_numels = vec(d.at("shard_numels").toTensor());
    r.padded = vec(d.at("padded").toTensor());
    r.numels = vec(d.at("numels").toTensor());
  }
  auto get = [&](const char* k, int64_t& v) {
    if (d.contains(k)) v = d.at(k).toInt();
  };
  get("host_shard_buffers", r.host_shard_buffers);
  get("host_shard_requested", r.host_shard_requested);
  get("host_shard_held", r.host_shard_held);
  get("host_grad_buffers", r.host_grad_buffers);
  get("host_grad_requested", r.host_grad_requested);
  get("backward_units_stepped", r.backward_units_stepped);
  get("backward_units_during_autograd", r.backward_units_during_autograd);
  return r;
}

/// Worker overrides for a quiet run of 2 epochs under `root`: no progress bar, summary, checkpoints
/// or sanity validation.
inline std::map<std::string, std::string> quiet_worker_kv(const std::string& root) {
  return {{"trainer.default_root_dir", root},        {"trainer.enable_progress_bar", "false"},
          {"trainer.enable_model_summary", "false"}, {"trainer.enable_checkpointing", "false"},
          {"trainer.num_sanity_val_steps", "0"},     {"trainer.max_epochs", "2"}};
}
/// The same, with the 3-block model of width 33 (flat sizes not divisible by the world size).
inline std::map<std::string, std::string> quiet_blocks_kv(const std::string& root) {
  auto kv = quiet_worker_kv(root);
  kv["blocks"] = "3";
  kv["hidden"] = "33";
  return kv;
}

/// Trains the worker's model in this process on one device with `overrides` (worker keys) and
/// returns what the worker would write (tensors on the CPU). batch_size is the global batch. On the
/// CPU unless `overrides` names trainer.accelerator.
WorkerResult train_single(const std::map<std::string, std::string>& overrides);

/// Runs the worker once (self-launching `trainer.devices` ranks). Returns the exit code.
int run_worker(const std::vector<std::string>& args, const std::string& dir, int timeout_s = 240,
               const std::map<std::string, std::string>& env = {});

/// Worker arguments: --out=FILE plus --key=value for each override.
inline std::vector<std::string> args_for(const std::string& out, const std::map<std::string, std::string>& kv) {
  std::vector<std::string> a{"--out=" + out};
  for (const auto& [k, v] : kv) a.push_back("--" + k + "=" + v);
  return a;
}

/// The worker's command line: the executable, then args_for(out, kv).
inline std::vector<std::string> worker_argv(const std::string& out, const std::map<std::string, std::string>& kv) {
  std::vector<std::string> a{VOLT_TEST_WORKER};
  for (auto& s : args_for(out, kv)) a.push_back(s);
  return a;
}

/// The variables torchrun gives rank `rank` of `world` (one node, rendezvous on 127.0.0.1:`port`),
/// plus `extra`.
inline std::map<std::string, std::string> torchrun_env(int rank, int world, int port,
                                                       std::map<std::string, std::string> extra = {}) {
  extra.insert({{"RANK", std::to_string(rank)},
                {"WORLD_SIZE", std::to_string(world)},
                {"LOCAL_RANK", std::to_string(rank)},
                {"LOCAL_WORLD_SIZE", std::to_string(world)},
                {"MASTER_ADDR", "127.0.0.1"},
                {"MASTER_PORT", std::to_string(port)}});
  return extra;
}
/// The variables SLURM gives task `rank` of `world` on this node (MASTER_PORT as a job script sets
/// it), plus `extra`.
inline std::map<std::string, std::string> slurm_env(int rank, int world, int port,
                                                    std::map<std::string, std::string> extra = {}) {
  extra.insert({{"SLURM_PROCID", std::to_string(rank)},
                {"SLURM_NTASKS", std::to_string(world)},
                {"SLURM_LOCALID", std::to_string(rank)},
                {"SLURM_NODELIST", "127.0.0.1"},
                {"MASTER_PORT", std::to_string(port)}});
  return extra;
}

/// True when no test worker writing `<dir>/o.pt` is running (no rank of that run was left behind).
inline bool no_worker_left(const std::string& dir) {
  // "[v]olt" keeps pgrep from matching the shell that runs it.
  const std::string cmd = "pgrep -f '[v]olt_test_worker --out=" + dir + "/o.pt' > /dev/null";
  return std::system(cmd.c_str()) != 0;
}

/// Largest absolute difference over all tensors of two state dicts (same keys required).
double max_state_diff(const std::map<std::string, torch::Tensor>& a, const std::map<std::string, torch::Tensor>& b);

}  // namespace volt::testing
