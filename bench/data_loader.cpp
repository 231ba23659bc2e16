// DataLoader workers keeping the compute fed: a dataset that costs 5 ms per sample (a sleep, standing
// for decoding or I/O) in batches of 16 (80 ms of loading per batch on one thread), and a training
// step of comparable compute (an MLP forward + backward + SGD). Step time (waiting for the batch
// included) for num_workers 0, 1, 2, 4, 8, 16 with prefetch_factor 2, against the compute alone.
// Usage: bench_data_loader [steps] [hidden] [workers list, e.g. 0,1,2,4,8,16] [intra-op threads] [rounds]
//        [views per sample]
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "volt/module/data.h"

using namespace volt;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int64_t kBatch = 16, kInput = 1024, kClasses = 10;
constexpr auto kSampleCost = std::chrono::milliseconds(5);

/// Sample i: a [1024] float input seeded by i and a class label, after 5 ms of "decoding".
class SlowDataset : public Dataset {
 public:
  explicit SlowDataset(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  Batch get(int64_t i) const override {
    std::this_thread::sleep_for(kSampleCost);
    auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(i));
    return {torch::randn({kInput}, gen), torch::tensor(i % kClasses, torch::kLong)};
  }

 private:
  int64_t n_;
};

/// Compute-bound rather than memory-bound (so the figures do not hinge on the weights staying in
/// cache): each sample goes through the MLP as `views` rows, the logits averaged over them.
struct Mlp : torch::nn::Module {
  Mlp(int64_t hidden, int64_t views) : views(views) {
    l1 = register_module("l1", torch::nn::Linear(kInput, hidden));
    l2 = register_module("l2", torch::nn::Linear(hidden, hidden));
    l3 = register_module("l3", torch::nn::Linear(hidden, hidden));
    l4 = register_module("l4", torch::nn::Linear(hidden, kClasses));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = x.repeat({views, 1});
    auto logits = l4(torch::relu(l3(torch::relu(l2(torch::relu(l1(h)))))));
    return logits.view({views, x.size(0), kClasses}).mean(0);
  }
  int64_t views;
  torch::nn::Linear l1{nullptr}, l2{nullptr}, l3{nullptr}, l4{nullptr};
};

struct Step {
  Step(int64_t hidden, int64_t views) : model(hidden, views), opt(model.parameters(), torch::optim::SGDOptions(1e-3)) {}
  void operator()(const Batch& b) {
    opt.zero_grad();
    auto loss = torch::cross_entropy_loss(model.forward(b[0]), b[1]);
    loss.backward();
    opt.step();
    (void)loss.item<double>();
  }
  Mlp model;
  torch::optim::SGD opt;
};

double seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Per-step times of one run: the whole step (waiting for the batch included) and the wait alone.
struct Run {
  std::vector<double> step, wait;
};

/// `steps` steps after `warmup`; workers < 0: the compute alone, on one batch kept in memory.
Run run(Step& step, const Batch& resident, int64_t workers, int64_t steps, int64_t warmup) {
  DataLoaderOptions o;
  o.batch_size = kBatch;
  o.num_workers = std::max<int64_t>(workers, 0);
  if (workers > 0) o.prefetch_factor = 2;
  DataLoader loader(std::make_shared<SlowDataset>((steps + warmup) * kBatch), o);
  std::optional<BatchStream> stream;
  if (workers >= 0) stream.emplace(loader.iterate());
  Run r;
  for (int64_t i = 0; i < steps + warmup; ++i) {
    const auto t0 = Clock::now();
    std::optional<Batch> b = stream ? stream->next() : std::optional<Batch>(resident);
    const double wait = seconds(t0);
    step(*b);
    if (i < warmup) continue;
    r.wait.push_back(wait);
    r.step.push_back(seconds(t0));
  }
  return r;
}

double mean(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / v.size(); }

}  // namespace

int main(int argc, char** argv) {
  const int64_t steps = argc > 1 ? std::stoll(argv[1]) : 20;
  const int64_t hidden = argc > 2 ? std::stoll(argv[2]) : 1024;
  std::vector<int64_t> workers;
  for (const auto& w : bench::split_list(argc > 3 ? argv[3] : "0,1,2,4,8,16")) workers.push_back(std::stoll(w));
  // One intra-op thread by default: the compute stands for the device, and the second core is left
  // to the loader (as the host is to a GPU's data loading).
  const int64_t threads = argc > 4 ? std::stoll(argv[4]) : 1;
  const int rounds = argc > 5 ? std::stoi(argv[5]) : 3;
  const int64_t views = argc > 6 ? std::stoll(argv[6]) : 24;
  const int64_t warmup = 3;
  torch::set_num_threads(static_cast<int>(threads));
  torch::manual_seed(1);
  Step step(hidden, views);
  const Batch resident = collate([&] {
    SlowDataset ds(kBatch);
    std::vector<Batch> s;
    for (int64_t i = 0; i < kBatch; ++i) s.push_back(ds.get(i));
    return s;
  }());
  DataLoader serial(std::make_shared<SlowDataset>(4 * kBatch), DataLoaderOptions{kBatch});
  auto t0 = Clock::now();
  for (int64_t i = 0; i < 4; ++i) serial.batch(i);
  const double load = seconds(t0) / 4.0;

  // This machine is shared: each configuration is measured between two runs of the compute alone
  // and compared with their mean, in several rounds; the table has the medians over the rounds.
  auto compute_alone = [&] { return mean(run(step, resident, -1, steps, warmup).step); };
  std::vector<double> compute;
  std::vector<std::vector<double>> step_ms(workers.size()), wait_ms(workers.size()), ratio(workers.size());
  for (int r = 0; r < rounds; ++r) {
    double before = compute_alone();
    compute.push_back(before);
    for (size_t k = 0; k < workers.size(); ++k) {
      Run res = run(step, resident, workers[k], steps, warmup);
      const double after = compute_alone();
      compute.push_back(after);
      step_ms[k].push_back(mean(res.step));
      wait_ms[k].push_back(mean(res.wait));
      ratio[k].push_back(mean(res.step) / (0.5 * (before + after)));
      before = after;
    }
  }
  std::printf(
      "batch %lld, 5 ms per sample; MLP %lld-%lld-%lld-%lld + SGD over %lld views of each sample; %lld "
      "intra-op thread(s); %d rounds of %lld steps\n",
      static_cast<long long>(kBatch), static_cast<long long>(kInput), static_cast<long long>(hidden),
      static_cast<long long>(hidden), static_cast<long long>(kClasses), static_cast<long long>(views),
      static_cast<long long>(threads), rounds, static_cast<long long>(steps));
  std::printf("compute alone: %.1f ms per step (median); loading alone: %.1f ms per batch on one thread\n\n",
              bench::median(compute) * 1e3, load * 1e3);
  std::printf(
      "| num_workers | step (ms) | waiting for the batch (ms) | ratio to compute alone |\n"
      "| --- | --- | --- | --- |\n");
  for (size_t k = 0; k < workers.size(); ++k)
    std::printf("| %lld | %.1f | %.1f | %.2f |\n", static_cast<long long>(workers[k]), bench::median(step_ms[k]) * 1e3,
                bench::median(wait_ms[k]) * 1e3, bench::median(ratio[k]));
  std::printf(
      "\nstep and wait: mean over a run's steps, median over rounds; ratio: to the compute alone measured just "
      "before and after (1.00 = the step never waits for data; target <= 1.2 with enough workers)\n");
  return 0;
}
