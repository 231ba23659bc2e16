// Metrics: logging, epoch reduction and publishing of the values LightningModule::log receives.
// The rules follow Lightning 2.x's logger connector (src/lightning/pytorch/trainer/connectors/
// logger_connector/result.py: _Metadata, _ResultMetric.update / compute, _ResultCollection.log /
// metrics) and LightningModule.log (src/lightning/pytorch/core/module.py).
#include "volt/trainer/metrics.h"

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "volt/core/errors.h"

namespace volt {

namespace detail {

std::map<std::string, double> to_host(const std::map<std::string, torch::Tensor>& tensors, int64_t& transfers) {
  // One stack and one copy per device, so reading N values waits for the device once, not N times.
  struct Group {
    torch::Device device;
    std::vector<const std::string*> names;
    std::vector<torch::Tensor> values;
  };
  std::vector<Group> groups;
  for (const auto& [name, value] : tensors) {
    auto g = std::find_if(groups.begin(), groups.end(), [&](const Group& x) { return x.device == value.device(); });
    if (g == groups.end()) g = groups.insert(groups.end(), Group{value.device(), {}, {}});
    g->names.push_back(&name);
    g->values.push_back(value);
  }
  std::map<std::string, double> out;
  for (const auto& g : groups) {
    const torch::Tensor host = torch::stack(g.values).to(torch::kCPU, torch::kDouble).contiguous();
    ++transfers;
    const double* p = host.data_ptr<double>();
    for (size_t i = 0; i < g.names.size(); ++i) out[*g.names[i]] = p[i];
  }
  return out;
}

const std::map<std::string, double>& LazyScalars::get() const {
  if (pending_.empty()) return values_;
  for (const auto& [name, v] : to_host(pending_, transfers_)) values_[name] = v;
  pending_.clear();
  return values_;
}

}  // namespace detail

namespace {

ReduceOp reduce_op(ReduceFx fx) {
  switch (fx) {
    case ReduceFx::Sum:
      return ReduceOp::Sum;
    case ReduceFx::Max:
      return ReduceOp::Max;
    case ReduceFx::Min:
      return ReduceOp::Min;
    case ReduceFx::Mean:
      break;
  }
  return ReduceOp::Mean;
}

std::string fx_name(ReduceFx fx) { return Choice<ReduceFx>(fx).text(); }

/// Lightning's extract_batch_size: the first tensor's first dimension (1 for a 0-dim tensor);
/// -1 when the batch holds no tensor.
int64_t infer_batch_size(const Batch& b) {
  auto size_of = [](const torch::Tensor& t) -> int64_t { return t.dim() == 0 ? 1 : t.size(0); };
  for (const auto& t : b.tensors())
    if (t.defined()) return size_of(t);
  for (const auto& name : b.names()) {
    if (b.is_child(name)) {
      const int64_t n = infer_batch_size(b.child(name));
      if (n >= 0) return n;
    } else if (b.at(name).defined()) {
      return size_of(b.at(name));
    }
  }
  return -1;
}

}  // namespace

void Metrics::set_batch(const Batch& batch) { batch_size_ = infer_batch_size(batch); }

void Metrics::claim(EpochState& s, const std::string& output, const std::string& name) {
  const auto [it, fresh] = s.owner.emplace(output, name);
  if (fresh || it->second == name) return;
  throw ConfigError(detail::str_cat("log('", name, "'): its value '", output, "' collides with the value of the name '",
                                    it->second, "' logged earlier in this epoch (a name logged with on_step and ",
                                    "on_epoch also gives '<name>_step' and '<name>_epoch'); rename one of them"));
}

void Metrics::log(const std::string& given, const torch::Tensor& value, const LogOptions& o, RunningStage stage) {
  VOLT_CHECK(stage != RunningStage::Predict, ConfigError, "log('", given,
             "') called in predict: predict_step returns its outputs instead of logging them (as in Lightning)");
  VOLT_CHECK(value.defined() && value.numel() == 1, ConfigError, "log('", given,
             "'): the value must be a one-element tensor, got ",
             value.defined() ? detail::str_cat("shape ", value.sizes()) : std::string("an undefined tensor"),
             "; log a reduction of it (e.g. its mean)");
  const Choice<ReduceFx> fx_choice(ChoiceNames<ReduceFx>::normalize(o.reduce_fx.text()));
  VOLT_CHECK(fx_choice.is_valid(), ConfigError, "log('", given, "'): reduce_fx '", o.reduce_fx.text(),
             "' is not supported; use mean, sum, max or min (Lightning's reductions), or reduce the values yourself ",
             "and log the result");
  const ReduceFx fx = fx_choice.value();
  VOLT_CHECK(!o.batch_size || *o.batch_size > 0, ConfigError, "log('", given, "'): batch_size must be > 0, got ",
             o.batch_size.value_or(0));
  VOLT_CHECK(!o.add_dataloader_idx || given.find("/dataloader_idx_") == std::string::npos, ConfigError, "log('", given,
             "'): the name must not contain '/dataloader_idx_' while add_dataloader_idx is true (the suffix is ",
             "added with several loaders); set add_dataloader_idx to false to name each loader's value yourself");
  const bool train = stage == RunningStage::Train;
  const bool on_step = o.on_step.value_or(train);
  const bool on_epoch = o.on_epoch.value_or(!train);
  VOLT_CHECK(on_step || on_epoch, ConfigError, "log('", given,
             "') with on_step=false and on_epoch=false logs nothing; set one of them (as Lightning requires)");
  if (stage == RunningStage::Sanity) return;

  const bool several = !train && num_dataloaders_ > 1 && o.add_dataloader_idx;
  const std::string name = several ? given + "/dataloader_idx_" + std::to_string(dataloader_idx_) : given;
  EpochState& s = state(train ? Loop::Train : Loop::Eval);
  const auto [known, fresh] = s.fx.emplace(name, fx);
  VOLT_CHECK(fresh || known->second == fx, ConfigError, "log('", name, "'): reduce_fx '", fx_name(fx),
             "' differs from '", fx_name(known->second),
             "' given for this name earlier in the epoch (Lightning forbids it too); log each reduction under its "
             "own name");
  const bool forked = on_step && on_epoch;
  const std::string step_name = forked ? name + "_step" : name;
  const std::string epoch_name = forked ? name + "_epoch" : name;
  claim(s, name, name);
  if (forked) {
    claim(s, step_name, name);
    claim(s, epoch_name, name);
  }

  // A detached double copy on the value's device: no host synchronization, and later in-place
  // changes of the caller's tensor do not reach what was logged (Lightning clones it too).
  const torch::Tensor v = value.detach().reshape({}).to(torch::kDouble, /*non_blocking=*/false, /*copy=*/true);
  const bool sync = o.sync_dist && !o.rank_zero_only;
  if (discard_) {
    if (on_step && sync) strategy_.all_reduce(v, reduce_op(fx));  // the other ranks' step value waits on it
    if (on_epoch) {
      EpochValue& e = epoch_value(s, epoch_name, name, fx, v);  // the name is reduced on every rank
      e.sync = sync;
      e.logger = o.logger;
      e.prog_bar = o.prog_bar;
    }
    return;
  }
  if (on_step) {
    // Lightning syncs the step value when it is logged, with the reduce_fx's operation.
    const torch::Tensor sv = sync ? strategy_.all_reduce(v, reduce_op(fx)) : v;
    if (o.logger) step_metrics_[step_name] = sv;
    callback_.set(step_name, sv);
    if (forked) callback_.set(name, sv);
    if (o.prog_bar) progress_bar_.set(name, sv);
  }
  if (on_epoch) {
    // _ResultMetric.update: mean accumulates value * batch_size and the batch sizes; sum, max and
    // min ignore the batch size. The batch size is only inferred where it matters (mean).
    double bs = 1;
    if (fx == ReduceFx::Mean) {
      const int64_t n = o.batch_size ? *o.batch_size : batch_size_.value_or(1);
      VOLT_CHECK(n > 0, ConfigError, "log('", name,
                 "'): the batch size cannot be inferred, the current batch holds no tensor; pass "
                 "LogOptions::batch_size");
      bs = static_cast<double>(n);
    }
    EpochValue& e = epoch_value(s, epoch_name, name, fx, v);
    switch (fx) {
      case ReduceFx::Mean:
        e.value = e.value + v * bs;
        break;
      case ReduceFx::Sum:
        e.value = e.value + v;
        break;
      case ReduceFx::Max:
        e.value = torch::maximum(e.value, v);
        break;
      case ReduceFx::Min:
        e.value = torch::minimum(e.value, v);
        break;
    }
    e.real = true;
    e.weight += bs;
    e.sync = sync;
    e.logger = o.logger;
    e.prog_bar = o.prog_bar;
    if (o.prog_bar && !on_step) progress_bar_.set(name, v);
  }
}

Metrics::EpochValue& Metrics::epoch_value(EpochState& s, const std::string& epoch_name, const std::string& name,
                                          ReduceFx fx, const torch::Tensor& like) {
  auto [it, first] = s.values.try_emplace(epoch_name);
  EpochValue& e = it->second;
  if (first) {
    // The reduction's identity: a rank that adds nothing leaves the others' result unchanged.
    const double neutral = fx == ReduceFx::Max   ? -std::numeric_limits<double>::infinity()
                           : fx == ReduceFx::Min ? std::numeric_limits<double>::infinity()
                                                 : 0.0;
    e.name = name;
    e.fx = fx;
    e.value = torch::full({}, neutral, like.options());
  }
  return e;
}

void Metrics::flush_step_metrics(const FitProgress& progress) {
  if (step_metrics_.empty()) return;
  if (logger_) {
    auto row = detail::to_host(step_metrics_, transfers_);
    row["epoch"] = static_cast<double>(progress.epoch);
    logger_->log_metrics(row, progress.global_step - 1);
  }
  step_metrics_.clear();
}

void Metrics::reset_epoch(Loop loop) {
  state(loop).clear();
  batch_size_.reset();
}

std::map<std::string, torch::Tensor> Metrics::compute(Loop loop) {
  // _ResultMetric.compute: the reduction over ranks uses the reduce_fx's operation; a mean reduces
  // its weighted sum and its batch-size sum (Lightning averages both, a ratio equal to that of
  // their sums), so it is the mean over every rank's samples.
  std::map<std::string, torch::Tensor> out;
  for (const auto& [output, e] : state(loop).values) {
    if (!e.sync && !e.real) continue;  // only stand-ins on this rank, and no collective to take part in
    if (e.fx == ReduceFx::Mean) {
      if (e.sync) {
        const torch::Tensor both =
            strategy_.all_reduce(torch::stack({e.value, torch::full({}, e.weight, e.value.options())}), ReduceOp::Sum);
        out[output] = both[0] / both[1];
      } else {
        out[output] = e.value / e.weight;
      }
    } else {
      out[output] = e.sync ? strategy_.all_reduce(e.value, reduce_op(e.fx)) : e.value;
    }
  }
  return out;
}

void Metrics::publish_epoch(Loop loop) {
  const auto& values = state(loop).values;
  for (const auto& [output, t] : compute(loop)) {
    const EpochValue& e = values.at(output);
    callback_.set(output, t);
    callback_.set(e.name, t);
    if (e.prog_bar) progress_bar_.set(e.name, t);
  }
  batch_size_.reset();
}

std::map<std::string, double> Metrics::finish_epoch(Loop loop, const FitProgress& progress) {
  const auto host = detail::to_host(compute(loop), transfers_);
  std::map<std::string, double> row;
  const auto& values = state(loop).values;
  for (const auto& [output, x] : host) {
    const EpochValue& e = values.at(output);
    callback_.set(output, x);
    callback_.set(e.name, x);
    if (e.prog_bar) progress_bar_.set(e.name, x);
    if (e.logger) row[output] = x;
  }
  reset_epoch(loop);
  if (logger_ && !row.empty()) {
    row["epoch"] = static_cast<double>(progress.epoch);
    logger_->log_metrics(row, std::max<int64_t>(progress.global_step - 1, 0));
    logger_->flush();
  }
  return host;
}

}  // namespace volt
