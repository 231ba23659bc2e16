#include "volt/callbacks/throughput_monitor.h"

#include <spdlog/spdlog.h>
#include <torch/cuda.h>

#include <algorithm>

#include "volt/loggers/logger.h"
#include "volt/trainer/trainer.h"

namespace volt {

namespace detail {

Throughput::Throughput(int64_t window_size, std::optional<double> available_flops, int64_t world_size,
                       std::string separator)
    : window_(static_cast<size_t>(window_size)),
      available_flops_(available_flops),
      world_size_(world_size),
      sep_(std::move(separator)) {}

void Throughput::update(double time, int64_t batches, int64_t samples, int64_t lengths, double flops) {
  auto push = [this](std::deque<double>& d, double v) {
    d.push_back(v);
    if (d.size() > window_) d.pop_front();
  };
  VOLT_CHECK(time_.empty() || time > time_.back(), ConfigError, "ThroughputMonitor: time must increase (", time,
             " after ", time_.empty() ? 0.0 : time_.back(), ")");
  push(time_, time);
  push(batches_, static_cast<double>(batches));
  push(samples_, static_cast<double>(samples));
  if (lengths >= 0) push(lengths_, static_cast<double>(lengths));
  if (flops >= 0) push(flops_, flops * static_cast<double>(world_size_));  // summed over ranks
}

std::map<std::string, double> Throughput::compute() const {
  std::map<std::string, double> m;
  if (time_.empty()) return m;
  m["time"] = time_.back();
  m["batches"] = batches_.back();
  m["samples"] = samples_.back();
  if (!lengths_.empty()) m["lengths"] = lengths_.back();
  const bool global = world_size_ > 1;
  const double ws = static_cast<double>(world_size_);
  const double elapsed = time_.back() - time_.front();
  if (time_.size() == window_) {
    const double batches = batches_.back() - batches_.front(), samples = samples_.back() - samples_.front();
    const double dev_samples = samples / elapsed, dev_batches = batches / elapsed;
    m["device" + sep_ + "batches_per_sec"] = dev_batches;
    m["device" + sep_ + "samples_per_sec"] = dev_samples;
    if (global) {
      m["batches_per_sec"] = dev_batches * ws;
      m["samples_per_sec"] = dev_samples * ws;
    }
    if (lengths_.size() == window_ && batches > 0) {
      const double avg_length = (lengths_.back() - lengths_.front()) / batches;
      if (global) m["items_per_sec"] = dev_samples * ws * avg_length;
      m["device" + sep_ + "items_per_sec"] = dev_samples * avg_length;
    }
  }
  if (flops_.size() == window_) {
    double sum = 0;
    for (double f : flops_) sum += f;
    const double flops_per_sec = (sum - flops_.front()) / elapsed;  // the first batch ran before time_.front()
    const double dev = flops_per_sec / ws;
    if (global) m["flops_per_sec"] = flops_per_sec;
    m["device" + sep_ + "flops_per_sec"] = dev;
    if (available_flops_) m["device" + sep_ + "mfu"] = dev / *available_flops_;
  }
  return m;
}

}  // namespace detail

namespace {
const torch::Tensor* first_tensor(const Batch& b) {
  for (const auto& t : b.tensors())
    if (t.defined()) return &t;
  for (const auto& name : b.names()) {
    if (b.is_child(name)) {
      if (const torch::Tensor* t = first_tensor(b.child(name))) return t;
    } else if (b.at(name).defined()) {
      return &b.at(name);
    }
  }
  return nullptr;
}
}  // namespace

ThroughputMonitor::ThroughputMonitor(ThroughputMonitorOptions options, SizeFn batch_size_fn, SizeFn length_fn)
    : options_(std::move(options)), batch_size_fn_(std::move(batch_size_fn)), length_fn_(std::move(length_fn)) {
  options_.validate();
}

double ThroughputMonitor::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void ThroughputMonitor::setup(Trainer& t, LightningModule&, const std::string& stage) {
  if (stage != "fit") return;
  throughput_.emplace(options_.window_size, options_.available_flops, t.world_size(), options_.separator);
  samples_ = lengths_ = batches_ = 0;
  has_lengths_ = true;
  last_.clear();
}

void ThroughputMonitor::on_train_start(Trainer& t, LightningModule&) {
  last_step_ = t.global_step();
  t0_ = now();
}

void ThroughputMonitor::on_validation_start(Trainer&, LightningModule&) { val_t0_ = now(); }

void ThroughputMonitor::on_validation_end(Trainer& t, LightningModule&) {
  // Validation inside fit is not training time: the train clock skips it.
  if (throughput_ && !t.sanity_checking() && val_t0_ > 0) t0_ += now() - val_t0_;
  val_t0_ = 0;
}

void ThroughputMonitor::on_train_batch_end(Trainer& t, LightningModule& m, const torch::Tensor&, const Batch& batch,
                                           int64_t) {
  if (!throughput_) return;
  const torch::Tensor* first = first_tensor(batch);
  samples_ += batch_size_fn_ ? batch_size_fn_(batch) : (first && first->dim() > 0 ? first->size(0) : 1);
  if (length_fn_)
    lengths_ += length_fn_(batch);
  else if (first && first->dim() >= 2)
    lengths_ += first->size(1);
  else
    has_lengths_ = false;
  ++batches_;
  // Gradient accumulation: only the batches that end an optimizer step are measured, as Lightning.
  if (t.global_step() == last_step_) return;
  last_step_ = t.global_step();
  if (t.strategy().root_device().is_cuda()) torch::cuda::synchronize(t.strategy().root_device().index());
  double flops = -1;
  if (auto* f = dynamic_cast<const FlopsPerBatch*>(&m))
    flops = f->flops_per_batch();
  else if (options_.flops_per_batch)
    flops = *options_.flops_per_batch;
  else if (!warned_flops_ && options_.available_flops) {
    warned_flops_ = true;
    spdlog::warn(
        "ThroughputMonitor: available_flops is set but neither the module (FlopsPerBatch) nor "
        "flops_per_batch gives the FLOPs of a batch: no flops_per_sec or mfu");
  }
  throughput_->update(now() - t0_, batches_, samples_, has_lengths_ ? lengths_ : -1, flops);
  const std::string prefix = "train" + options_.separator;
  last_.clear();
  for (const auto& [k, v] : throughput_->compute()) last_[prefix + k] = v;
  const int64_t every = options_.log_every_n_steps > 0 ? options_.log_every_n_steps : t.options().log_every_n_steps;
  // At the step of this batch's training metrics (as DeviceStatsMonitor's), every logger as Lightning's.
  if (t.global_step() % every == 0)
    for (const auto& l : t.loggers()) l->log_metrics(last_, std::max<int64_t>(0, t.global_step() - 1));
}

}  // namespace volt
