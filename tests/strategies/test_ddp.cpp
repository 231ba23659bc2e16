#include <malloc.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "boring_model.h"
#include "distributed/multi_rank.h"
#include "volt/core/errors.h"
#include "volt/strategies/ddp.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using namespace volt::testing;

namespace {
std::map<std::string, std::string> base_trainer(const std::string& root) { return quiet_worker_kv(root); }
}  // namespace

TEST_CASE("DDP on 2 and 4 ranks matches single-process training with the same global batch", "[ddp][multirank]") {
  for (int world : {2, 4}) {
    for (int accum : {1, 2}) {
      DYNAMIC_SECTION("world " << world << " accumulate " << accum) {
        const std::string dir = temp_dir("ddp");
        auto kv = base_trainer(dir);
        kv["trainer.accumulate_grad_batches"] = std::to_string(accum);
        auto single_kv = kv;
        single_kv["batch_size"] = std::to_string(4 * world);
        WorkerResult single = train_single(single_kv);

        auto ddp_kv = kv;
        ddp_kv["batch_size"] = "4";
        ddp_kv["trainer.strategy"] = "ddp";
        ddp_kv["trainer.devices"] = std::to_string(world);
        const std::string out = dir + "/ddp.pt";
        REQUIRE(run_worker(args_for(out, ddp_kv), dir) == 0);
        WorkerResult ddp = read_worker_output(out);
        REQUIRE(ddp.global_step == single.global_step);
        REQUIRE(ddp.losses.size() == single.losses.size());
        for (size_t i = 0; i < ddp.losses.size(); ++i) CHECK(ddp.losses[i] == Approx(single.losses[i]).epsilon(1e-5));
        CHECK(max_state_diff(ddp.state, single.state) < 2e-5);
      }
    }
  }
}

TEST_CASE("DDP with clipping by norm and Adam matches single process", "[ddp][multirank]") {
  const std::string dir = temp_dir("ddp-clip");
  auto kv = base_trainer(dir);
  kv["trainer.gradient_clip_val"] = "0.05";
  kv["adam"] = "true";
  kv["lr"] = "0.01";
  auto single_kv = kv;
  single_kv["batch_size"] = "8";
  WorkerResult single = train_single(single_kv);
  kv["batch_size"] = "4";
  kv["trainer.strategy"] = "ddp";
  kv["trainer.devices"] = "2";
  REQUIRE(run_worker(args_for(dir + "/o.pt", kv), dir) == 0);
  CHECK(max_state_diff(read_worker_output(dir + "/o.pt").state, single.state) < 2e-5);
}

TEST_CASE("DDP under simulated torchrun and SLURM environments", "[ddp][multirank][launch]") {
  for (std::string launcher : {"torchrun", "slurm"}) {
    DYNAMIC_SECTION(launcher) {
      const std::string dir = temp_dir("ddp-env");
      auto kv = base_trainer(dir);
      kv["batch_size"] = "4";
      kv["trainer.strategy"] = "ddp";
      kv["trainer.devices"] = "2";
      const int port = volt::detail::find_free_port();
      std::vector<std::vector<std::string>> argvs;
      std::vector<std::map<std::string, std::string>> envs;
      for (int r = 0; r < 2; ++r) {
        argvs.push_back(worker_argv(dir + "/o.pt", kv));
        envs.push_back(launcher == "torchrun" ? torchrun_env(r, 2, port) : slurm_env(r, 2, port));
      }
      auto codes = run_processes(argvs, envs, 240, dir + "/rank");
      INFO(read_text(dir + "/rank.0.log") << read_text(dir + "/rank.1.log"));
      REQUIRE(codes == std::vector<int>{0, 0});
      auto single_kv = base_trainer(dir);
      single_kv["batch_size"] = "8";
      CHECK(max_state_diff(read_worker_output(dir + "/o.pt").state, train_single(single_kv).state) < 2e-5);
      CHECK(read_text(dir + "/rank.0.log").find(launcher + " environment") != std::string::npos);
    }
  }
}

TEST_CASE("a rank that dies makes the job fail fast with a message naming it, leaving no processes",
          "[ddp][multirank][fault]") {
  for (std::string kind : {"exit", "kill"}) {
    DYNAMIC_SECTION(kind) {
      const std::string dir = temp_dir("ddp-fault");
      auto kv = base_trainer(dir);
      kv["batch_size"] = "4";
      kv["trainer.strategy"] = "ddp";
      kv["trainer.devices"] = "2";
      kv["trainer.strategy"] = "{name: ddp, timeout: 600}";
      kv["fault_rank"] = "1";
      kv["fault_step"] = "3";
      kv["fault_kind"] = kind;
      const auto t0 = std::chrono::steady_clock::now();
      const int code = run_worker(args_for(dir + "/o.pt", kv), dir, 120);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const std::string log = read_text(dir + "/worker.0.log");
      INFO(log);
      CHECK(code != 0);
      CHECK(code != -1);  // finished by itself, well within the 600 s collective timeout
      CHECK(secs < 60);
      CHECK(log.find("rank 1") != std::string::npos);
      CHECK(no_worker_left(dir));
    }
  }
}

TEST_CASE("DDP on an uneven dataset pads every rank to the same steps and validates without hanging",
          "[ddp][multirank][sampler]") {
  // 67 training samples on 2 ranks: 34 per rank after padding, 9 batches of 4 (the last of 2);
  // the validation set has 33 samples, unpadded: 17 on rank 0 (5 batches, the last of 1) and 16 on
  // rank 1 (4 batches). A rank with one batch more would sit in a collective: the short timeout
  // turns that into a failure, not a hang.
  const std::string dir = temp_dir("ddp-uneven");
  auto kv = base_trainer(dir);
  kv["samples"] = "67";
  kv["batch_size"] = "4";
  kv["trainer.devices"] = "2";
  kv["trainer.strategy"] = "{name: ddp, timeout: 30}";
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(run_worker(args_for(dir + "/o.pt", kv), dir, 180) == 0);
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 150);
  WorkerResult r = read_worker_output(dir + "/o.pt");
  CHECK(r.global_step == 2 * 9);
  CHECK(r.losses.size() == 2 * 9);  // one rank-averaged loss per step: every rank took every step

  // The last validation ran after the last step on each rank's share of the 33 samples: val_loss
  // (sync_dist) is Lightning's epoch mean: every rank's batch losses weighted by their batch sizes,
  // over all ranks' samples, each counted once (17 + 16).
  BoringModel m;
  {
    torch::NoGradGuard ng;
    for (auto& kv2 : m.named_parameters()) {
      REQUIRE(r.state.count(kv2.key()));
      kv2.value().copy_(r.state.at(kv2.key()));
    }
  }
  m.eval();
  torch::NoGradGuard ng;
  auto val_data = std::make_shared<RandomDataset>(33, 32, 99);  // the worker's validation set
  double weighted = 0, samples = 0;
  for (int64_t rank = 0; rank < 2; ++rank) {
    DataLoader val(val_data, DataLoaderOptions{4, false, false, 0});
    val.set_distributed(rank, 2, /*pad=*/false);
    REQUIRE(val.num_batches() == (rank == 0 ? 5 : 4));
    for (int64_t i = 0; i < val.num_batches(); ++i) {
      auto out = m.forward(val.batch(i)[0]);
      const double bs = static_cast<double>(out.size(0));
      weighted += torch::mse_loss(out, torch::ones_like(out)).item<double>() * bs;
      samples += bs;
    }
  }
  REQUIRE(samples == 33);
  const double expected = weighted / samples;
  CHECK(r.val_loss == Approx(expected).epsilon(1e-5));
}

TEST_CASE("a rank that hangs makes the others fail with a timeout naming the collective", "[ddp][multirank][fault]") {
  const std::string dir = temp_dir("ddp-hang");
  auto kv = base_trainer(dir);
  kv["batch_size"] = "4";
  kv["trainer.devices"] = "2";
  kv["trainer.strategy"] = "{name: ddp, timeout: 10}";  // seconds
  kv["fault_rank"] = "1";
  kv["fault_step"] = "3";
  kv["fault_kind"] = "hang";  // sleeps before its 4th step; rank 0 waits in the gradient all-reduce
  const auto t0 = std::chrono::steady_clock::now();
  const int code = run_worker(args_for(dir + "/o.pt", kv), dir, 120);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string log = read_text(dir + "/worker.0.log");
  INFO(log);
  CHECK(code != 0);
  CHECK(code != -1);  // ended by itself, not by this test's timeout
  CHECK(secs >= 9);   // not before the collective timeout...
  CHECK(secs < 60);   // ...and well within a minute of it
  CHECK_THAT(log, Catch::Contains("all_reduce on rank 0"));
  CHECK_THAT(log, Catch::Contains("timed out", Catch::CaseSensitive::No));
  CHECK_FALSE(std::filesystem::exists(dir + "/o.pt"));  // rank 0 never finished
  // No process of this run is left: the hung rank was stopped by rank 0's launcher.
  CHECK(no_worker_left(dir));
}

TEST_CASE("ModelCheckpoint: ranks that disagree on the monitored value save together, as rank 0 decides",
          "[ddp][multirank][model_checkpoint]") {
  // val_rank is logged without sync_dist: rank 0 sees 0.5 0.3 0.4 0.1 0.6 over the epochs, rank 1
  // 1 minus that. Deciding alone, rank 1 would skip saves rank 0 makes (and the other way round)
  // and the ranks' collectives would fall out of step; rank 0's values decide for all.
  const std::string dir = temp_dir("ddp-ckpt");
  auto kv = base_trainer(dir);
  kv["trainer.max_epochs"] = "5";
  kv["samples"] = "16";  // 2 training batches and 1 validation batch per rank and epoch
  kv["batch_size"] = "4";
  kv["trainer.devices"] = "2";
  kv["trainer.strategy"] = "{name: ddp, timeout: 30}";
  kv["rank_metric"] = "true";
  kv["trainer.enable_checkpointing"] = "true";
  kv["checkpoint_monitor"] = "val_rank";
  kv["checkpoint_top_k"] = "2";
  kv["checkpoint_filename"] = "'{epoch}-{val_rank:.2f}'";  // quoted: a bare {...} is a YAML map
  REQUIRE(run_worker(args_for(dir + "/o.pt", kv), dir, 180) == 0);
  std::set<std::string> files;
  for (auto& e : std::filesystem::directory_iterator(dir + "/checkpoints")) files.insert(e.path().filename().string());
  CHECK(files == std::set<std::string>{"epoch=1-val_rank=0.30.ckpt", "epoch=3-val_rank=0.10.ckpt"});
}

// ---- parameters without a gradient (find_unused_parameters, static_graph, gradient_as_bucket_view)
//

TEST_CASE("process_group_backend: nccl on the CPU is a ConfigError from the Trainer, before training",
          "[ddp][config]") {
  TrainerOptions o = quiet_options(temp_dir("nccl-cpu"));
  o.accelerator = "cpu";
  o.devices = 2;
  o.strategy = "ddp";
  o.strategy.ddp.process_group_backend = "nccl";
  BoringModel model;
  DataLoader loader(std::make_shared<RandomDataset>(16), DataLoaderOptions{8, false, false, 0});
  try {
    Trainer trainer(o);
    trainer.fit(model, loader);
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Catch::Contains("process_group_backend") && Catch::Contains("use gloo"));
  }
  CHECK(model.losses.empty());
}
