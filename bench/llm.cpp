// LlamaLM (demos/llm/llama_lm.h) trained by volt's Trainer on the CPU: one JSON line of step times
// per run, for bench/llm_cpu.py, which runs the same model in plain PyTorch beside it and prints the
// comparison table.
//
// Usage: bench_llm [--strategy single_device|ddp|fsdp] [--devices 1] [--threads T] [--steps 30]
//                  [--warmup 5] [--batch 8] [--block 256] [--vocab 8192] [--hidden 256] [--layers 4]
//                  [--heads 8] [--kv_heads 2] [--intermediate 0] [--tie 0|1] [--batches FILE] [--trainer 1|0]
//
// --batch is the global batch: each of --devices ranks trains on batch / devices rows of it. With
// --batches FILE (torch.save {"tokens": [n, batch, block + 1] int64}, bench/llm_cpu.py writes it)
// step s trains on window s % n; without it, random tokens from seed 1. Every step runs AdamW (two
// param groups), the warm-up + cosine schedule and gradient clipping at 1.0, in float32.
// Step time: from one on_train_batch_start to the next (the whole loop iteration: loading, forward,
// backward, clipping, optimizer and scheduler); the median after --warmup steps, max over ranks;
// also split into forward (with the loss, up to on_before_backward), backward (up to
// on_after_backward) and the rest.
// --threads: intra-op threads per process (default: the cores divided by the processes).
// DDP and FSDP self-launch ranks 1.. (this binary again, same arguments); rank 0 prints the line:
//   {"framework": "volt", "strategy": ..., "processes": ..., "threads": ..., "params": ..., "batch": ...,
//    "block": ..., "steps": <timed>, "step_ms": ..., "forward_ms": ..., "backward_ms": ..., "rest_ms": ...,
//    "tokens_per_s": ..., "loss_first": ..., "loss_last": ...}
// FSDP: FULL_SHARD, each decoder layer a unit (LlamaLM wraps the layers as it builds them).
// --trainer 0: one process, the same steps as a plain loop without the Trainer (raw_loop).
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "bench_util.h"
#include "volt/checkpoint/torch_save.h"
#include "volt/core/errors.h"
#include "volt/core/malloc_tuning.h"
#include "volt/demos/llm/llama_lm.h"
#include "volt/distributed/launcher.h"
#include "volt/trainer/trainer.h"

using namespace volt;
using Clock = std::chrono::steady_clock;

namespace {

/// Window s of [n, batch, block + 1] tokens as {"input_ids", "labels"}: the sample index is
/// s * batch + row.
class TokenWindows : public Dataset {
 public:
  explicit TokenWindows(torch::Tensor tokens) : tokens_(tokens.flatten(0, 1)) {}
  int64_t size() const override { return tokens_.size(0); }
  Batch get(int64_t i) const override {
    const auto w = tokens_[i];
    Batch b;
    b.set("input_ids", w.slice(0, 0, -1));
    b.set("labels", w.slice(0, 1));
    return b;
  }

 private:
  torch::Tensor tokens_;
};

/// Loop iteration to loop iteration, split at backward's start and end.
class StepTimer : public Callback {
 public:
  std::string state_key() const override { return "StepTimer"; }
  void on_train_batch_start(Trainer&, LightningModule&, const Batch&, int64_t) override {
    const auto now = Clock::now();
    if (started_) close(now);
    start_ = now;
    started_ = true;
  }
  void on_before_backward(Trainer&, LightningModule&, const torch::Tensor&) override { backward_ = Clock::now(); }
  void on_after_backward(Trainer&, LightningModule&) override { after_ = Clock::now(); }
  void on_train_batch_end(Trainer& t, LightningModule&, const torch::Tensor& loss, const Batch&, int64_t) override {
    losses.push_back(loss.item<double>());
    if (t.global_step() == t.max_steps()) close(Clock::now());
  }
  std::vector<double> times, forward, backward, rest, losses;

 private:
  static double seconds(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  }
  void close(Clock::time_point now) {
    times.push_back(seconds(start_, now));
    forward.push_back(seconds(start_, backward_));
    backward.push_back(seconds(backward_, after_));
    rest.push_back(seconds(after_, now));
  }
  Clock::time_point start_, backward_, after_;
  bool started_ = false;
};

std::map<std::string, std::string> parse_args(int argc, char** argv) {
  std::map<std::string, std::string> a = {{"strategy", "single_device"},
                                          {"devices", "1"},
                                          {"threads", "0"},
                                          {"steps", "30"},
                                          {"warmup", "5"},
                                          {"batch", "8"},
                                          {"block", "256"},
                                          {"vocab", "8192"},
                                          {"hidden", "256"},
                                          {"layers", "4"},
                                          {"heads", "8"},
                                          {"kv_heads", "2"},
                                          {"intermediate", "0"},
                                          {"tie", "0"},
                                          {"batches", ""},
                                          {"trainer", "1"}};
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k.rfind("--", 0) != 0 || !a.count(k.substr(2)) || i + 1 >= argc)
      throw ConfigError("bench_llm: unknown or incomplete argument '" + k + "' (see the usage in bench/llm.cpp)");
    a[k.substr(2)] = argv[++i];
  }
  return a;
}

/// --trainer 0: the same steps written as a plain loop (forward, loss, backward, clipping, AdamW,
/// scheduler) on one process, without the Trainer: what the model alone costs.
int raw_loop(demos::LlamaLM& model, const torch::Tensor& tokens, int64_t steps, int64_t warmup, int64_t batch,
             int64_t block, int64_t threads) {
  model.configure_model();
  model.train();
  auto config = model.configure_optimizers().configs.at(0);
  std::vector<torch::Tensor> params;
  for (auto& g : config.optimizer->param_groups())
    for (auto& p : g.params()) params.push_back(p);
  std::vector<double> times, forward, backward, rest, losses;
  for (int64_t s = 0; s < steps; ++s) {
    const auto t0 = Clock::now();
    const auto w = tokens[s];
    Batch b;
    b.set("input_ids", w.slice(1, 0, -1));
    b.set("labels", w.slice(1, 1));
    auto loss = model.loss(b);
    const auto t1 = Clock::now();
    for (auto& p : params) p.mutable_grad() = torch::Tensor();
    loss.backward();
    const auto t2 = Clock::now();
    torch::nn::utils::clip_grad_norm_(params, 1.0);
    config.optimizer->step();
    config.lr_scheduler->step();
    losses.push_back(loss.item<double>());
    const auto t3 = Clock::now();
    auto sec = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
    times.push_back(sec(t0, t3));
    forward.push_back(sec(t0, t1));
    backward.push_back(sec(t1, t2));
    rest.push_back(sec(t2, t3));
  }
  auto med = [&](const std::vector<double>& v) {
    return bench::median(std::vector<double>(v.begin() + std::min<size_t>(warmup, v.size()), v.end())) * 1e3;
  };
  std::printf(
      "{\"framework\": \"volt-no-trainer\", \"strategy\": \"single_device\", \"processes\": 1, \"threads\": %lld, "
      "\"batch\": %lld, \"block\": %lld, \"step_ms\": %.3f, \"forward_ms\": %.3f, \"backward_ms\": %.3f, "
      "\"rest_ms\": %.3f, \"tokens_per_s\": %.1f, \"loss_first\": %.6f, \"loss_last\": %.6f}\n",
      static_cast<long long>(threads), static_cast<long long>(batch), static_cast<long long>(block), med(times),
      med(forward), med(backward), med(rest), static_cast<double>(batch * block) / med(times) * 1e3, losses.front(),
      losses.back());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  volt::tune_malloc_for_training();  // as the `volt` command does
  try {
    spdlog::set_level(spdlog::level::warn);
    auto a = parse_args(argc, argv);
    auto num = [&](const char* k) { return std::stoll(a.at(k)); };
    const int64_t devices = num("devices"), steps = num("steps"), warmup = num("warmup"), batch = num("batch");
    const int64_t block = num("block");
    VOLT_CHECK(batch % devices == 0, ConfigError, "bench_llm: --batch ", batch, " must split over --devices ", devices);
    VOLT_CHECK(steps > warmup + 1, ConfigError, "bench_llm: --steps must exceed --warmup + 1");
    const int64_t threads =
        num("threads") > 0 ? num("threads") : std::max<int64_t>(1, volt::detail::available_cores() / devices);
    torch::set_num_threads(static_cast<int>(threads));

    torch::Tensor tokens;
    if (!a.at("batches").empty()) {
      tokens = TorchSaveReader(a.at("batches")).read("tokens");
      VOLT_CHECK(tokens.dim() == 3 && tokens.size(1) == batch && tokens.size(2) == block + 1, ConfigError,
                 "bench_llm: ", a.at("batches"), " holds tokens ", tokens.sizes(), ", expected [n, ", batch, ", ",
                 block + 1, "]");
    } else {
      tokens = torch::randint(num("vocab"), {steps, batch, block + 1}, at::detail::createCPUGenerator(1), torch::kLong);
    }
    // Enough windows for every step, in order (the loader would start a second epoch otherwise).
    if (tokens.size(0) < steps) tokens = tokens.repeat({(steps + tokens.size(0) - 1) / tokens.size(0), 1, 1});
    tokens = tokens.slice(0, 0, steps).contiguous();

    demos::LlamaLMOptions o;
    o.vocab_size = num("vocab");
    o.hidden_size = num("hidden");
    o.num_hidden_layers = num("layers");
    o.num_attention_heads = num("heads");
    o.num_key_value_heads = num("kv_heads");
    o.intermediate_size = num("intermediate");
    o.max_position_embeddings = std::max<int64_t>(2048, block);
    o.tie_word_embeddings = num("tie") != 0;
    o.lr = 3e-4;
    o.warmup_steps = 2;
    torch::manual_seed(1);
    demos::LlamaLM model(o);

    if (num("trainer") == 0) return raw_loop(model, tokens, steps, warmup, batch, block, threads);

    TrainerOptions t = bench::quiet_trainer_options(steps);
    t.accelerator = "cpu";
    t.devices = devices;
    t.gradient_clip_val = 1.0;
    const std::string strategy = a.at("strategy");
    if (strategy == "fsdp") {
      t.strategy.name = "fsdp";  // FULL_SHARD by default
    } else {
      VOLT_CHECK(strategy == "single_device" || strategy == "ddp", ConfigError,
                 "bench_llm: --strategy must be single_device, ddp or fsdp, got ", strategy);
      t.strategy.name = devices > 1 ? "ddp" : "single_device";
    }
    DataLoaderOptions lo;
    lo.batch_size = batch / devices;
    DataLoader loader(std::make_shared<TokenWindows>(tokens), lo);
    auto timer = std::make_shared<StepTimer>();
    Trainer trainer(t, {timer});
    trainer.fit(model, loader);

    // Medians after the warm-up, max over ranks: the step, and its forward (with the loss), backward
    // (with DDP's and FSDP's communication) and the rest (clipping, optimizer, scheduler, loading).
    auto timed_median = [&](const std::vector<double>& v) {
      const std::vector<double> after(v.begin() + std::min<size_t>(warmup, v.size()), v.end());
      return trainer.strategy()
          .all_reduce(torch::tensor(bench::median(after), torch::kDouble), ReduceOp::Max)
          .item<double>();
    };
    const double step_s = timed_median(timer->times), forward_s = timed_median(timer->forward);
    const double backward_s = timed_median(timer->backward), rest_s = timed_median(timer->rest);
    if (trainer.is_global_zero()) {
      const double tokens_per_step = static_cast<double>(batch * block);
      std::printf(
          "{\"framework\": \"volt\", \"strategy\": \"%s\", \"processes\": %lld, \"threads\": %lld, \"params\": %lld, "
          "\"batch\": %lld, \"block\": %lld, \"steps\": %lld, \"step_ms\": %.3f, \"forward_ms\": %.3f, "
          "\"backward_ms\": %.3f, \"rest_ms\": %.3f, \"tokens_per_s\": %.1f, \"loss_first\": %.6f, "
          "\"loss_last\": %.6f}\n",
          strategy.c_str(), static_cast<long long>(trainer.world_size()), static_cast<long long>(threads),
          static_cast<long long>(o.num_parameters()), static_cast<long long>(batch), static_cast<long long>(block),
          static_cast<long long>(timer->times.size() - std::min<size_t>(warmup, timer->times.size())), step_s * 1e3,
          forward_s * 1e3, backward_s * 1e3, rest_s * 1e3, tokens_per_step / step_s, timer->losses.front(),
          timer->losses.back());
      std::fflush(stdout);
    }
    trainer.wait_for_ranks();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_llm: error: %s\n", e.what());
    return 1;
  }
}
