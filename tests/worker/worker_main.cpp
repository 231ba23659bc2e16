// A rank process for multi-rank tests. Usage:
//   volt_test_worker --out=FILE [--trainer.KEY=VALUE ...] [--model.KEY=VALUE ...]
//                    [--fault_rank=R --fault_step=S
//                    --fault_kind=exit|exit2|kill|hang|stop|throw|sigterm|sigterm_late|sigusr1|before_rendezvous|predict_late]
//                    [--fault_attempt=N]  (only in attempt N of a job under trainer.max_restarts)
//                    [--rank_metric=true] [--checkpoint_monitor=M --checkpoint_top_k=K --checkpoint_filename=F]
//                    [--checkpoint_every_n_train_steps=N] [--ckpt_path=PATH|last] [--fsize_limit=BYTES]
//                    [--backbone_finetune_at=E] [--on_exception_dir=DIR]
//                    [--write_fault=kill|throw --write_fault_match=S --fault_rank=R]  (an asynchronous
//                    checkpoint write of a file whose path contains S, on rank R, half-way through)
//   volt_test_worker --pg_scenario=OUT   (process-group collectives, distributed/process_group_scenario.h)
//   volt_test_worker --llama_parity=CONFIG   (LlamaLM against the PyTorch reference, demos/llm/llama_parity_worker.h)
// Trains the BoringModel (tests/boring_model.h) on RandomDataset and, on rank 0, writes
// {state_dict, losses} to FILE with torch::pickle_save. With trainer.devices > 1 and no launcher
// environment it self-launches the other ranks, exactly as the `volt` CLI does.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <thread>

#include "backbone_model.h"
#include "boring_model.h"
#include "checkpoint/hook_tensors.h"
#include "demos/llm/llama_parity_worker.h"
#include "distributed/process_group_scenario.h"
#include "gan_model.h"
#include "stock_encoder_model.h"
#include "volt/callbacks/backbone_finetuning.h"
#include "volt/callbacks/ema_weight_averaging.h"
#include "volt/callbacks/model_checkpoint.h"
#include "volt/callbacks/on_exception_checkpoint.h"
#include "volt/callbacks/prediction_writer.h"
#include "volt/callbacks/stochastic_weight_averaging.h"
#include "volt/checkpoint/tensor_archive.h"
#include "volt/core/host_buffers.h"
#include "volt/core/options.h"
#include "volt/distributed/elastic_agent.h"
#include "volt/strategies/fsdp/fsdp_strategy.h"
#include "volt/trainer/trainer.h"

using namespace volt;

namespace {
struct WorkerConfig {
  TrainerOptions trainer;
  int64_t samples = 64;
  int64_t batch_size = 8;
  bool shuffle = true;
  int64_t blocks = 2;
  int64_t hidden = 32;
  double lr = 0.1;
  bool adam = false;
  double dropout = 0.0;
  std::string out;
  int64_t fault_rank = -1;
  int64_t fault_step = -1;
  std::string fault_kind = "exit";
  int64_t fault_attempt = -1;      // >= 0: only in that attempt of a restarting job
  bool rank_metric = false;        // log "val_rank", a per-rank value, without sync_dist
  bool log_sync = false;           // log per-rank values with sync_dist and each reduce_fx (LogSyncModel)
  bool all_gather_probe = false;   // LightningModule::all_gather checked on every rank (AllGatherProbe)
  std::string checkpoint_monitor;  // non-empty: a ModelCheckpoint monitoring it
  int64_t checkpoint_top_k = 1;
  std::string checkpoint_filename = "{epoch}-{step}";
  int64_t checkpoint_every_n_train_steps = 0;  // > 0: a ModelCheckpoint saving every N steps and last.ckpt
  std::string ckpt_path;                       // resume from it
  int64_t fsize_limit = 0;                     // > 0: RLIMIT_FSIZE, as a disk that fills up
  bool iterable = false;    // train on the samples as an IterableDataset split by rank (shards may differ by one)
  std::string predict_dir;  // non-empty: after fit, predict predict_samples samples, written there per rank
  int64_t predict_samples = 37;
  bool gan = false;                   // train tests/gan_model.h's GAN (manual optimization, two optimizers) instead
  bool stock = false;                 // train tests/stock_encoder_model.h's stock TransformerEncoderLayer stack instead
  bool deferred = false;              // with stock: build it in configure_model(), each layer wrap()ped as built
  bool record_init = false;           // also write the full state at the start of training as "init_state"
  int64_t backbone_finetune_at = -1;  // >= 0: tests/backbone_model.h's model with BackboneFinetuning at that epoch
  std::string on_exception_dir;       // non-empty: an OnExceptionCheckpoint saving there
  std::string averaging;              // "ema" (EMAWeightAveraging, ema_decay) or "swa" (StochasticWeightAveraging)
  double ema_decay = 0.5;
  double swa_lr = 0.05;
  int64_t swa_epoch_start = 2;
  std::string hook_tensors;  // non-empty: the model and a TensorKeeper keep tensors in checkpoints; marks go here
  int64_t hook_tensors_mismatch_rank = -1;  // that rank's TensorKeeper adds a tensor of another shape
  std::string write_fault;                  // "kill" / "throw": in an asynchronous checkpoint write (fault_rank's)
  std::string write_fault_match;
  template <class V>
  void visit(V& v) {
    v("write_fault", write_fault)("write_fault_match", write_fault_match);
    v("trainer", trainer)("samples", samples)("batch_size", batch_size)("shuffle", shuffle)("blocks", blocks)(
        "hidden", hidden)("lr", lr)("adam", adam)("dropout", dropout)("out", out)("fault_rank", fault_rank)(
        "fault_step", fault_step)("fault_kind", fault_kind)("fault_attempt", fault_attempt)("rank_metric", rank_metric)(
        "log_sync", log_sync)("all_gather_probe", all_gather_probe)("checkpoint_monitor", checkpoint_monitor)(
        "checkpoint_top_k", checkpoint_top_k)("checkpoint_filename", checkpoint_filename)(
        "checkpoint_every_n_train_steps", checkpoint_every_n_train_steps)("ckpt_path", ckpt_path)(
        "fsize_limit", fsize_limit)("iterable", iterable)("predict_dir", predict_dir)(
        "predict_samples", predict_samples)("gan", gan)("stock", stock)("deferred", deferred)("record_init",
                                                                                              record_init);
    v("backbone_finetune_at", backbone_finetune_at)("on_exception_dir", on_exception_dir);
    v("averaging", averaging)("ema_decay", ema_decay)("swa_lr", swa_lr)("swa_epoch_start", swa_epoch_start);
    v("hook_tensors", hook_tensors)("hook_tensors_mismatch_rank", hook_tensors_mismatch_rank);
  }
};

/// The BoringModel, optionally logging "val_rank" in validation: on rank 0 kRankScript[epoch], on the
/// other ranks 1 - that (deliberately not synced, so ranks disagree on which epoch is best).
constexpr double kRankScript[] = {0.5, 0.3, 0.4, 0.1, 0.6};
class WorkerModel : public testing::BoringModel {
 public:
  WorkerModel(testing::BoringOptions o, bool rank_metric) : BoringModel(o), rank_metric_(rank_metric) {}
  void validation_step(const Batch& b, int64_t i) override {
    BoringModel::validation_step(b, i);
    if (!rank_metric_) return;
    const double v = kRankScript[trainer()->current_epoch() % 5];
    log("val_rank", trainer()->global_rank() == 0 ? v : 1.0 - v);
  }
  Batch predict_step(const Batch& b, int64_t) override { return {forward(b[0])}; }
  void on_save_checkpoint(CheckpointMeta& c) override {
    if (keep_tensors) testing::save_module_tensors(*this, c);
  }
  void on_load_checkpoint(const CheckpointMeta& c) override {
    if (keep_tensors) testing::load_module_tensors(*this, c);
  }
  bool keep_tensors = false;  // tests/checkpoint/hook_tensors.h's tensors, "model.*"

 private:
  bool rank_metric_;
};

/// Logs 10 * rank + batch_idx + 1 per training batch with sync_dist under every reduce_fx, weighted
/// by a per-rank batch_size (4 on rank 0, 2 elsewhere); tests/trainer/test_log_sync.cpp checks them.
class LogSyncModel : public WorkerModel {
 public:
  using WorkerModel::WorkerModel;
  torch::Tensor training_step(const Batch& b, int64_t i) override {
    const int64_t rank = trainer()->global_rank();
    const torch::Tensor v = torch::tensor(static_cast<double>(10 * rank + i + 1));
    const int64_t bs = rank == 0 ? 4 : 2;
    for (const char* fx : {"mean", "sum", "max", "min"})
      log(std::string("sync_") + fx, v,
          {.on_step = false, .on_epoch = true, .sync_dist = true, .reduce_fx = fx, .batch_size = bs});
    log("local_mean", v, {.on_step = false, .on_epoch = true, .batch_size = bs});
    log("step_max", v, {.on_step = true, .on_epoch = false, .sync_dist = true, .reduce_fx = "max"});
    return WorkerModel::training_step(b, i);
  }
};

/// The RandomDataset's samples as a stream, split contiguously by shard; no length.
class RandomStream : public IterableDataset {
 public:
  explicit RandomStream(int64_t n) : data_(n), n_(n) {}
  std::unique_ptr<SampleStream> stream(const ShardInfo& shard) const override {
    auto [first, last] = shard.range(n_);
    return SampleStream::from([this, k = first, last = last]() mutable -> std::optional<Batch> {
      if (k >= last) return std::nullopt;
      return data_.get(k++);
    });
  }

 private:
  testing::RandomDataset data_;
  int64_t n_;
};

class FaultCallback : public Callback {
 public:
  FaultCallback(int64_t rank, int64_t step, std::string kind) : rank_(rank), step_(step), kind_(std::move(kind)) {}
  std::string state_key() const override { return "Fault"; }
  void on_train_batch_start(Trainer& t, LightningModule&, const Batch&, int64_t) override {
    if (t.global_rank() != rank_ || t.global_step() != step_ || kind_ == "predict_late") return;
    if (kind_ == "kill") ::raise(SIGKILL);
    if (kind_ == "hang") std::this_thread::sleep_for(std::chrono::hours(1));
    if (kind_ == "stop") ::raise(SIGSTOP);                  // alive but silent: no heartbeat, sockets open
    if (kind_ == "sigterm") return (void)::raise(SIGTERM);  // handled: fit stops at this step's check
    if (kind_ == "sigusr1") return (void)::raise(SIGUSR1);  // SLURM's requeue signal
    if (kind_ == "throw") throw std::runtime_error("injected fault at step " + std::to_string(step_));
    if (kind_ == "sigterm_late") return;  // see on_train_batch_end
    if (kind_ == "exit2") ::_exit(2);     // as the CLI exits on a configuration error
    ::_exit(3);
  }
  /// "predict_late": exit code 3, two seconds after this rank's predict finished (rank 0 has
  /// finished by then).
  void teardown(Trainer& t, LightningModule&, const std::string& stage) override {
    if (kind_ != "predict_late" || stage != "predict" || t.global_rank() != rank_) return;
    std::this_thread::sleep_for(std::chrono::seconds(2));
    ::_exit(3);
  }
  /// "sigterm_late": SIGTERM after step `step_`'s check (with max_steps = step_: after the last one).
  void on_train_batch_end(Trainer& t, LightningModule&, const torch::Tensor&, const Batch&, int64_t) override {
    if (kind_ == "sigterm_late" && t.global_rank() == rank_ && t.global_step() == step_) ::raise(SIGTERM);
  }

 private:
  int64_t rank_, step_;
  std::string kind_;
};
/// Records the loss of every step averaged over ranks (the global batch's loss).
/// LightningModule::all_gather on every rank at on_train_start: the values in rank order, and with
/// sync_grads the gradient of this rank's input (the sum over ranks of its slice's gradient).
class AllGatherProbe : public Callback {
 public:
  std::string state_key() const override { return "AllGatherProbe"; }
  double ok = -1;  // 1: every rank saw what it should (agreed by all)
  void on_train_start(Trainer& t, LightningModule& m) override {
    const int64_t world = t.world_size(), rank = t.global_rank();
    auto x = torch::tensor({1.0 + rank, 10.0 * (rank + 1)}, torch::kDouble);
    auto g = m.all_gather(x);
    bool good = g.sizes() == torch::IntArrayRef({world, 2});
    for (int64_t r = 0; good && r < world; ++r)
      good = g[r][0].item<double>() == 1.0 + r && g[r][1].item<double>() == 10.0 * (r + 1);
    auto w = torch::ones({2}, torch::TensorOptions().dtype(torch::kDouble).requires_grad(true));
    auto y = m.all_gather(w * x, /*sync_grads=*/true);
    (y * (rank + 1)).sum().backward();                 // rank q weighs every slice by q + 1
    const double weights = world * (world + 1) / 2.0;  // the sum over ranks of q + 1
    good = good && y.requires_grad() && torch::allclose(w.grad(), x * weights);
    ok = t.strategy().all_reduce(torch::tensor({good ? 1.0 : 0.0}, torch::kDouble), ReduceOp::Min).item<double>();
  }
};

class LossRecorder : public Callback {
 public:
  std::string state_key() const override { return "LossRecorder"; }
  void on_train_batch_end(Trainer& t, LightningModule&, const torch::Tensor& loss, const Batch&, int64_t) override {
    losses.push_back(t.strategy().all_reduce(loss.detach().to(torch::kDouble), ReduceOp::Mean).item<double>());
  }
  std::vector<double> losses;
};

/// The full model state when training starts (after the strategy's set-up), streamed unit by unit.
class InitRecorder : public Callback {
 public:
  std::string state_key() const override { return "InitRecorder"; }
  void on_train_start(Trainer& t, LightningModule& m) override { state = t.strategy().model_state_dict(m); }
  std::map<std::string, torch::Tensor> state;
};

/// Under FSDP: what each unit holds, checked between forward and backward.
class ShardProbe : public Callback {
 public:
  std::string state_key() const override { return "ShardProbe"; }
  void on_before_backward(Trainer& t, LightningModule&, const torch::Tensor&) override {
    auto* f = dynamic_cast<FSDPStrategy*>(&t.strategy());
    if (!f) return;
    nonroot_unsharded_after_forward = 0;
    auto units = f->units();
    root_unsharded_after_forward = static_cast<int64_t>(units[0].unsharded_bytes);
    for (size_t i = 1; i < units.size(); ++i)
      nonroot_unsharded_after_forward += static_cast<int64_t>(units[i].unsharded_bytes);
    shard_numels.clear();
    padded.clear();
    numels.clear();
    for (auto& u : units) {
      shard_numels.push_back(u.shard_numel);
      padded.push_back(u.padded_numel);
      numels.push_back(u.numel);
    }
    // Optimizer-visible elements on this rank (its state is sized by these).
    optimizer_numel = 0;
    for (auto& g : t.optimizer()->param_groups())
      for (auto& p : g.params()) optimizer_numel += p.numel();
    // Exact-size host buffers holding the shards (cpu_offload).
    const HostBufferStats h = host_buffer_stats("fsdp.shard");
    host_shard_buffers = h.buffers;
    host_shard_requested = h.requested;
    host_shard_held = h.held;
    const HostBufferStats g = host_buffer_stats("fsdp.grad");  // offloaded to the host from a GPU
    host_grad_buffers = g.buffers;
    host_grad_requested = g.requested;
  }
  /// optimizer_in_backward: how the last sync backward stepped the units.
  void on_after_backward(Trainer& t, LightningModule&) override {
    auto* f = dynamic_cast<FSDPStrategy*>(&t.strategy());
    if (!f || !f->steps_in_backward()) return;
    const auto steps = f->backward_steps();
    if (steps.units == 0) return;  // an accumulation micro-step: nothing reduced, nothing stepped
    backward_units_stepped = steps.units;
    backward_units_during_autograd = steps.during_autograd;
  }
  int64_t nonroot_unsharded_after_forward = -1, root_unsharded_after_forward = -1, optimizer_numel = -1;
  int64_t host_shard_buffers = -1, host_shard_requested = -1, host_shard_held = -1;
  int64_t host_grad_buffers = -1, host_grad_requested = -1;
  int64_t backward_units_stepped = -1, backward_units_during_autograd = -1;
  std::vector<int64_t> shard_numels, padded, numels;
};
}  // namespace

int main(int argc, char** argv) {
  // --pg_scenario=OUT: the process-group collectives instead of training (process_group_scenario.h).
  if (argc == 2 && std::string(argv[1]).rfind("--pg_scenario=", 0) == 0)
    return testing::run_process_group_scenario(std::string(argv[1]).substr(14));
  if (argc == 2 && std::string(argv[1]).rfind("--llama_parity=", 0) == 0)
    return testing::run_llama_parity(std::string(argv[1]).substr(15));
  try {
    YAML::Node root(YAML::NodeType::Map);
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a.rfind("--", 0) != 0 || a.find('=') == std::string::npos) throw ConfigError("bad argument " + a);
      apply_override(root, a.substr(2, a.find('=') - 2), a.substr(a.find('=') + 1));
    }
    auto cfg = options_from_yaml<WorkerConfig>(root, "");
    // trainer.max_restarts: as the `volt` CLI, this process becomes the restart agent.
    if (auto code = run_elastic(cfg.trainer.max_restarts, cfg.trainer.devices, cfg.trainer.num_nodes)) return *code;
    // fault_attempt: the fault strikes only in that attempt of a restarting job (0: the first).
    if (cfg.fault_attempt >= 0 &&
        std::to_string(cfg.fault_attempt) !=
            (std::getenv("TORCHELASTIC_RESTART_COUNT") ? std::getenv("TORCHELASTIC_RESTART_COUNT") : "0"))
      cfg.fault_rank = -1;
    // A launched rank that dies before it joins the rendezvous (rank 0 must not wait for it).
    if (cfg.fault_kind == "before_rendezvous" && std::getenv("RANK") &&
        std::stoll(std::getenv("RANK")) == cfg.fault_rank)
      std::_Exit(3);
    if (cfg.fsize_limit > 0) {
      ::signal(SIGXFSZ, SIG_IGN);  // a write past the limit then fails with EFBIG, as on a full disk
      struct rlimit rl {
        static_cast<rlim_t>(cfg.fsize_limit), static_cast<rlim_t>(cfg.fsize_limit)
      };
      ::setrlimit(RLIMIT_FSIZE, &rl);
    }
    torch::set_num_threads(1);
    torch::manual_seed(cfg.trainer.seed.value_or(7));
    testing::BoringOptions bo;
    bo.blocks = cfg.blocks;
    bo.hidden = cfg.hidden;
    bo.lr = cfg.lr;
    bo.adam = cfg.adam;
    bo.dropout = cfg.dropout;
    std::unique_ptr<LightningModule> owned;
    if (cfg.gan)
      owned = std::make_unique<testing::GanModel>();
    else if (cfg.stock)
      owned = std::make_unique<testing::StockEncoderModel>(
          testing::StockEncoderOptions{.layers = cfg.blocks, .lr = cfg.lr, .deferred = cfg.deferred});
    else if (cfg.backbone_finetune_at >= 0)
      owned = std::make_unique<testing::BackboneModel>(cfg.lr, cfg.adam);
    else if (cfg.log_sync)
      owned = std::make_unique<LogSyncModel>(bo, cfg.rank_metric);
    else
      owned = std::make_unique<WorkerModel>(bo, cfg.rank_metric);
    LightningModule& model = *owned;
    DataLoader loader = cfg.iterable ? DataLoader(std::make_shared<RandomStream>(cfg.samples),
                                                  DataLoaderOptions{cfg.batch_size, false, false, 3})
                                     : DataLoader(std::make_shared<testing::RandomDataset>(cfg.samples),
                                                  DataLoaderOptions{cfg.batch_size, cfg.shuffle, false, 3});
    DataLoader val(std::make_shared<testing::RandomDataset>(cfg.samples / 2, 32, 99),
                   DataLoaderOptions{cfg.batch_size, false, false, 0});
    auto recorder = std::make_shared<LossRecorder>();
    auto probe = std::make_shared<ShardProbe>();
    std::vector<std::shared_ptr<Callback>> cbs{recorder, probe};
    auto gather_probe = std::make_shared<AllGatherProbe>();
    if (cfg.all_gather_probe) cbs.push_back(gather_probe);
    auto init = std::make_shared<InitRecorder>();
    if (cfg.record_init) cbs.push_back(init);
    if (!cfg.hook_tensors.empty()) {
      cbs.push_back(std::make_shared<testing::TensorKeeper>(cfg.hook_tensors, cfg.hook_tensors_mismatch_rank));
      if (auto* wm = dynamic_cast<WorkerModel*>(owned.get())) wm->keep_tensors = true;
    }
    // Before any ModelCheckpoint: a checkpoint written at a step's end must hold that step's average.
    std::shared_ptr<EMAWeightAveraging> ema;
    std::shared_ptr<StochasticWeightAveraging> swa;
    if (cfg.averaging == "ema") {
      EMAWeightAveragingOptions eo;
      eo.decay = cfg.ema_decay;
      cbs.push_back(ema = std::make_shared<EMAWeightAveraging>(eo));
    } else if (cfg.averaging == "swa") {
      StochasticWeightAveragingOptions so;
      so.swa_lrs.values = {cfg.swa_lr};
      so.swa_epoch_start = {static_cast<double>(cfg.swa_epoch_start), false};
      so.annealing_epochs = 1;
      cbs.push_back(swa = std::make_shared<StochasticWeightAveraging>(so));
    } else if (!cfg.averaging.empty()) {
      throw ConfigError("averaging: expected 'ema' or 'swa', got '" + cfg.averaging + "'");
    }
    if (cfg.fault_rank >= 0)
      cbs.push_back(std::make_shared<FaultCallback>(cfg.fault_rank, cfg.fault_step, cfg.fault_kind));
    if (!cfg.checkpoint_monitor.empty()) {
      ModelCheckpointOptions mo;
      mo.monitor = cfg.checkpoint_monitor;
      mo.save_top_k = cfg.checkpoint_top_k;
      mo.filename = cfg.checkpoint_filename;
      cbs.push_back(std::make_shared<ModelCheckpoint>(mo));
    }
    if (cfg.checkpoint_every_n_train_steps > 0) {
      ModelCheckpointOptions mo;
      mo.every_n_train_steps = cfg.checkpoint_every_n_train_steps;
      mo.save_last = true;
      cbs.push_back(std::make_shared<ModelCheckpoint>(mo));
    }
    if (!cfg.predict_dir.empty()) {
      PredictionWriterOptions wo;
      wo.output_dir = cfg.predict_dir;
      wo.write_interval = "epoch";
      cbs.push_back(std::make_shared<PredictionWriter>(wo));
    }
    if (cfg.backbone_finetune_at >= 0) {
      BackboneFinetuningOptions bf;
      bf.unfreeze_backbone_at_epoch = cfg.backbone_finetune_at;
      cbs.push_back(std::make_shared<BackboneFinetuning>(bf));
    }
    if (!cfg.on_exception_dir.empty()) cbs.push_back(std::make_shared<OnExceptionCheckpoint>(cfg.on_exception_dir));
    Trainer trainer(cfg.trainer, cbs);
    if (!cfg.write_fault.empty())
      volt::detail::set_deferred_write_hook([&cfg, &trainer](const std::string& path, int64_t written, int64_t total) {
        if (trainer.global_rank() != cfg.fault_rank || path.find(cfg.write_fault_match) == std::string::npos ||
            written != total / 2)
          return;
        if (cfg.write_fault == "kill") ::raise(SIGKILL);
        throw std::runtime_error("injected write fault in " + path);
      });
    trainer.fit(model, loader, &val, cfg.ckpt_path);
    if (!cfg.predict_dir.empty()) {
      DataLoader pl(std::make_shared<testing::RandomDataset>(cfg.predict_samples, 32, 5),
                    DataLoaderOptions{cfg.batch_size, false, false, 0});
      trainer.predict(model, pl, "", /*return_predictions=*/false);
    }
    auto state = trainer.strategy().model_state_dict(model);
    if (trainer.is_global_zero() && !cfg.out.empty()) {
      c10::Dict<std::string, at::Tensor> sd;
      for (auto& [k, v] : state) sd.insert(k, v);
      c10::impl::GenericDict out(c10::StringType::get(), c10::AnyType::get());
      out.insert("state_dict", c10::impl::toGenericDict(sd));
      out.insert("losses", torch::tensor(recorder->losses, torch::kDouble));
      if (cfg.record_init) {
        c10::Dict<std::string, at::Tensor> is;
        for (auto& [k, v] : init->state) is.insert(k, v);
        out.insert("init_state", c10::impl::toGenericDict(is));
      }
      out.insert("val_loss",
                 trainer.callback_metrics().count("val_loss") ? trainer.callback_metrics().at("val_loss") : -1.0);
      out.insert("global_step", trainer.global_step());
      if (cfg.all_gather_probe) out.insert("all_gather_ok", gather_probe->ok);
      if (ema || swa) {
        out.insert("averaged_numel", ema ? ema->averaged_numel() : swa->averaged_numel());
        out.insert("n_averaged", ema ? ema->n_averaged() : swa->n_averaged());
      }
      out.insert("nonroot_unsharded_after_forward", probe->nonroot_unsharded_after_forward);
      out.insert("root_unsharded_after_forward", probe->root_unsharded_after_forward);
      out.insert("optimizer_numel", probe->optimizer_numel);
      out.insert("host_shard_buffers", probe->host_shard_buffers);
      out.insert("host_shard_requested", probe->host_shard_requested);
      out.insert("host_shard_held", probe->host_shard_held);
      out.insert("host_grad_buffers", probe->host_grad_buffers);
      out.insert("host_grad_requested", probe->host_grad_requested);
      out.insert("backward_units_stepped", probe->backward_units_stepped);
      out.insert("backward_units_during_autograd", probe->backward_units_during_autograd);
      out.insert("shard_numels",
                 torch::tensor(probe->shard_numels.empty() ? std::vector<int64_t>{-1} : probe->shard_numels));
      out.insert("padded", torch::tensor(probe->padded.empty() ? std::vector<int64_t>{-1} : probe->padded));
      out.insert("numels", torch::tensor(probe->numels.empty() ? std::vector<int64_t>{-1} : probe->numels));
      auto bytes = torch::pickle_save(out);
      std::ofstream(cfg.out, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    }
    trainer.wait_for_ranks();  // as the CLI: a rank failing after this one finished fails the run
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "worker: error: " << e.what() << std::endl;
    return 1;
  }
}
