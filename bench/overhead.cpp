// Framework overhead: median step time of volt's single-device Trainer vs a hand-written LibTorch
// loop on the same model, data and optimizer, measured side by side (alternating rounds) in one run.
// Usage: bench_overhead [data_dir] [steps_per_round] [rounds]
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>

#include "bench_util.h"
#include "volt/demos/language_model.h"
#include "volt/demos/wikitext2_data.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using Clock = std::chrono::steady_clock;

namespace {
using bench::median;

struct StepTimer : Callback {
  std::string state_key() const override { return "StepTimer"; }
  void on_train_batch_start(Trainer&, LightningModule&, const Batch&, int64_t) override { t0 = Clock::now(); }
  void on_train_batch_end(Trainer&, LightningModule&, const torch::Tensor&, const Batch&, int64_t) override {
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  Clock::time_point t0;
  std::vector<double> times;
};
}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "../shared/data/wikitext-2";
  const int64_t steps = argc > 2 ? std::stoll(argv[2]) : 30;
  const int rounds = argc > 3 ? std::stoi(argv[3]) : 3;
  spdlog::set_level(spdlog::level::warn);
  demos::WikiText2DataOptions dopt;
  dopt.data_dir = dir;
  dopt.shuffle = false;
  demos::WikiText2Data data(dopt);
  demos::LanguageModelOptions mopt;
  mopt.vocab_size = data.vocab_size();
  mopt.dropout = 0.0;

  std::vector<double> volt_times, hand_times;
  for (int round = 0; round < rounds; ++round) {
    {  // volt
      torch::manual_seed(1);
      demos::LanguageModel model(mopt);
      auto loader = data.train_loader();
      TrainerOptions t = bench::quiet_trainer_options(steps);
      t.seed.reset();  // seeded above, as the hand-written loop is
      auto timer = std::make_shared<StepTimer>();
      Trainer trainer(t, {timer});
      trainer.fit(model, *loader);
      volt_times.insert(volt_times.end(), timer->times.begin() + 2, timer->times.end());  // skip warm-up
    }
    {  // the same work by hand
      torch::manual_seed(1);
      demos::LanguageModel model(mopt);
      model.configure_model();
      model.train();
      auto cfg = model.configure_optimizers()[0];
      auto loader = data.train_loader();
      for (int64_t i = 0; i < steps; ++i) {
        Batch b = loader->batch(i);
        auto t0 = Clock::now();  // as the Trainer's timer: batch loading is outside the step
        auto out = model.forward(b[0], b[1]);
        auto loss = torch::nll_loss(out, b[1].reshape(-1));
        loss.backward();
        cfg.optimizer->step();
        for (auto& p : model.parameters()) p.mutable_grad() = torch::Tensor();  // set_to_none
        (void)loss.item<double>();
        if (i >= 2) hand_times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      }
    }
  }
  const double v = median(volt_times), h = median(hand_times);
  std::printf("| loop | median step (ms) | steps |\n| --- | --- | --- |\n");
  std::printf("| hand-written LibTorch | %.2f | %zu |\n", h * 1e3, hand_times.size());
  std::printf("| volt Trainer (single_device) | %.2f | %zu |\n", v * 1e3, volt_times.size());
  std::printf("\nratio volt / hand-written = %.3f (target <= 1.03)\n", v / h);
  return 0;
}
