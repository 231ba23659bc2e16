// The training stall of a checkpoint save, synchronous vs AsyncCheckpointIO (trainer.plugins), on the
// 107 M demo Transformer (vocab 33278, ninp 512, nhead 8, nhid 2048, 10 + 10 layers), AdamW, fp32,
// one device, batch 2 x block 32. A callback saves with trainer.save_checkpoint every `every` steps;
// a step's time runs from one on_train_batch_start to the next, so the save (in on_train_batch_end)
// falls in the step that contains it. Stall = that step minus the median step without a save.
// Rounds alternate sync and async in one process. Prints a table.
// Usage: bench_async_checkpoint [data_dir] [--out DIR] [--steps 13] [--every 4] [--rounds 2]
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>

#include "bench_util.h"
#include "volt/core/files.h"
#include "volt/demos/language_model.h"
#include "volt/demos/wikitext2_data.h"
#include "volt/distributed/launcher.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {
using bench::median;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Saves every `every` steps and times the steps and the save calls.
struct SaveAndTime : Callback {
  SaveAndTime(std::string dir, int64_t every) : dir(std::move(dir)), every(every) {}
  std::string state_key() const override { return "SaveAndTime"; }
  void on_train_batch_start(Trainer&, LightningModule&, const Batch&, int64_t) override {
    const auto now = Clock::now();
    if (started) steps.push_back({std::chrono::duration<double>(now - t0).count(), saved_in_step});
    t0 = now;
    started = true;
    saved_in_step = false;
  }
  void on_train_batch_end(Trainer& t, LightningModule&, const torch::Tensor&, const Batch&, int64_t) override {
    if (t.global_step() % every != 0) return;
    const auto s0 = Clock::now();
    t.save_checkpoint(dir + "/step" + std::to_string(t.global_step()) + ".ckpt");
    save_calls.push_back(since(s0));
    saved_in_step = true;
  }
  std::string dir;
  int64_t every;
  Clock::time_point t0;
  bool started = false, saved_in_step = false;
  struct Step {
    double seconds;
    bool saved;
  };
  std::vector<Step> steps;
  std::vector<double> save_calls;
};

struct Result {
  // with_save / save_calls: a run's later saves (the first one's copy buffers are fresh; first_*)
  std::vector<double> normal, with_save, after_save, save_calls, first_step, first_call;
  double fit_s = 0;
};
}  // namespace

int main(int argc, char** argv) {
  std::string data_dir = "../shared/data/wikitext-2", out = "/tmp/volt-bench-async-ckpt";
  int64_t steps = 13, every = 4, rounds = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&] { return std::string(i + 1 < argc ? argv[++i] : ""); };
    if (k == "--out")
      out = value();
    else if (k == "--steps")
      steps = std::stoll(value());
    else if (k == "--every")
      every = std::stoll(value());
    else if (k == "--rounds")
      rounds = std::stoll(value());
    else
      data_dir = k;
  }
  spdlog::set_level(spdlog::level::warn);
  torch::set_num_threads(static_cast<int>(volt::detail::available_cores()));
  demos::WikiText2DataOptions dopt;
  dopt.data_dir = data_dir;
  dopt.batch_size = 2;
  dopt.block_size = 32;
  dopt.shuffle = false;
  demos::WikiText2Data data(dopt);
  demos::LanguageModelOptions mopt;
  mopt.vocab_size = std::max<int64_t>(33278, data.vocab_size());
  mopt.ninp = 512;
  mopt.nhead = 8;
  mopt.nhid = 2048;
  mopt.nlayers = 10;
  mopt.optimizer = "adamw";
  mopt.dropout = 0.0;

  std::map<std::string, Result> results;
  int64_t params = 0;
  uint64_t file_bytes = 0;
  for (int64_t round = 0; round < rounds; ++round)
    for (const std::string mode : {"sync", "async"}) {
      const std::string dir = out + "/" + mode;
      volt::detail::remove_tree(dir);
      fs::create_directories(dir);
      torch::manual_seed(1);
      demos::LanguageModel model(mopt);
      auto loader = data.train_loader();
      TrainerOptions t = bench::quiet_trainer_options(steps);
      t.accelerator = "cpu";
      t.default_root_dir = dir;
      if (mode == "async") t.plugins = {"AsyncCheckpointIO"};
      auto timer = std::make_shared<SaveAndTime>(dir, every);
      Trainer trainer(t, {timer});
      const auto f0 = Clock::now();
      trainer.fit(model, *loader);  // waits for the last asynchronous write
      Result& r = results[mode];
      r.fit_s += since(f0) / static_cast<double>(rounds);
      bool first = true;
      for (size_t i = 1; i < timer->steps.size(); ++i) {  // the first step warms up
        const auto& s = timer->steps[i];
        if (s.saved) {
          (first ? r.first_step : r.with_save).push_back(s.seconds);
          first = false;
        } else {
          (timer->steps[i - 1].saved ? r.after_save : r.normal).push_back(s.seconds);
        }
      }
      r.first_call.push_back(timer->save_calls.front());
      r.save_calls.insert(r.save_calls.end(), timer->save_calls.begin() + 1, timer->save_calls.end());
      params = 0;
      for (const auto& p : model.parameters()) params += p.numel();
      file_bytes = fs::file_size(dir + "/step" + std::to_string(every) + ".ckpt");
      volt::detail::remove_tree(dir);
    }

  const Result &s = results["sync"], &a = results["async"];
  const double normal = median(s.normal), normal_a = median(a.normal);
  const double sync_stall = median(s.with_save) - normal, async_stall = median(a.with_save) - normal_a;
  std::printf(
      "\nCheckpoint save stall, demo Transformer: %lld parameters, AdamW, fp32, one CPU device, checkpoint %.0f MB; "
      "medians over %zu later and %zu first saves per mode\n\n",
      static_cast<long long>(params), static_cast<double>(file_bytes) / 1e6, s.with_save.size(), s.first_step.size());
  std::printf(
      "| save | normal step (s) | step with the save (s) | stall (s) | save call (s) | first save: stall (s) | "
      "first save: call (s) | next step (s) | fit (s) |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  auto row = [](const char* name, const Result& r, double n) {
    std::printf("| %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.1f |\n", name, n, median(r.with_save),
                median(r.with_save) - n, median(r.save_calls), median(r.first_step) - n, median(r.first_call),
                median(r.after_save), r.fit_s);
  };
  row("synchronous", s, normal);
  row("AsyncCheckpointIO", a, normal_a);
  std::printf("\nasync stall / sync stall = %.3f (goal <= 0.10); first saves: %.3f\n", async_stall / sync_stall,
              (median(a.first_step) - normal_a) / (median(s.first_step) - normal));
  return 0;
}
