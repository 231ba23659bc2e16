#include "volt/callbacks/stochastic_weight_averaging.h"

#include <spdlog/spdlog.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/optim/optimizer.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "volt/trainer/trainer.h"

namespace volt {

namespace detail {

SwaLrs YamlCodec<SwaLrs>::decode(const YAML::Node& n, const std::string& key) {
  if (n.IsNull()) return {};
  if (n.IsSequence()) return {YamlCodec<std::vector<double>>::decode(n, key)};
  if (!n.IsScalar()) type_error(key, "a float or a list of floats", n);
  return {{YamlCodec<double>::decode(n, key)}};
}

YAML::Node YamlCodec<SwaLrs>::encode(const SwaLrs& v) {
  if (v.values.empty()) return YAML::Node();
  if (v.values.size() == 1) return YAML::Node(v.values[0]);
  return YamlCodec<std::vector<double>>::encode(v.values);
}

SwaEpochStart YamlCodec<SwaEpochStart>::decode(const YAML::Node& n, const std::string& key) {
  if (!n.IsScalar()) type_error(key, "an integer (epoch) or a float (fraction of max_epochs)", n);
  // As Lightning tells int from float: 1 is the first epoch, 1.0 all of max_epochs.
  if (n.Scalar().find_first_of(".eE") != std::string::npos) return {YamlCodec<double>::decode(n, key), true};
  return {static_cast<double>(YamlCodec<int64_t>::decode(n, key)), false};
}

YAML::Node YamlCodec<SwaEpochStart>::encode(const SwaEpochStart& v) {
  if (!v.is_fraction) return YAML::Node(static_cast<int64_t>(v.value));
  std::ostringstream os;
  os << v.value;
  std::string s = os.str();
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return YAML::Node(s);
}

}  // namespace detail

void StochasticWeightAveragingOptions::validate(const std::string& prefix) const {
  VOLT_CHECK(!swa_lrs.values.empty(), ConfigError, "config key '", prefix,
             ".swa_lrs' is required: the SWA learning rate (a float for every param group, or a list, one per group)");
  for (double lr : swa_lrs.values)
    VOLT_CHECK(lr > 0.0, ConfigError, "config key '", prefix, ".swa_lrs': every LR must be > 0, got ", lr);
  if (swa_epoch_start.is_fraction)
    VOLT_CHECK(swa_epoch_start.value >= 0.0 && swa_epoch_start.value <= 1.0, ConfigError, "config key '", prefix,
               ".swa_epoch_start': a fraction of max_epochs must be in [0, 1], got ", swa_epoch_start.value);
  else
    VOLT_CHECK(swa_epoch_start.value >= 1.0, ConfigError, "config key '", prefix,
               ".swa_epoch_start': an epoch must be >= 1 (the first epoch is 1), got ", swa_epoch_start.value);
  VOLT_CHECK(annealing_epochs >= 0, ConfigError, "config key '", prefix, ".annealing_epochs': must be >= 0, got ",
             annealing_epochs);
  VOLT_CHECK(annealing_strategy == "cos" || annealing_strategy == "linear", ConfigError, "config key '", prefix,
             ".annealing_strategy': expected 'cos' or 'linear', got '", annealing_strategy, "'");
  detail::validate_averaging_device(device, prefix + ".device");
}

StochasticWeightAveraging::StochasticWeightAveraging(StochasticWeightAveragingOptions options, AveragingFn avg_fn)
    : options_(std::move(options)),
      avg_fn_(std::move(avg_fn)),
      averaged_(options_.device.value_or(""), /*buffers=*/false, /*average_buffers=*/false) {
  options_.validate();
  VOLT_CHECK(avg_fn_ != nullptr, ConfigError, "StochasticWeightAveraging: the averaging function is empty");
}

namespace {
/// The first BatchNorm module's path ("" when there is none).
std::string find_batch_norm(LightningModule& m) {
  // Not include_self: a module built on the stack has no shared_ptr to itself.
  for (const auto& kv : m.named_modules("", /*include_self=*/false)) {
    const auto& mod = kv.value();
    const bool stock = dynamic_cast<torch::nn::BatchNorm1dImpl*>(mod.get()) ||
                       dynamic_cast<torch::nn::BatchNorm2dImpl*>(mod.get()) ||
                       dynamic_cast<torch::nn::BatchNorm3dImpl*>(mod.get());
    // volt::hooked(BatchNorm...) and modules of one's own take the wrapped type's name.
    if (stock || mod->name().find("BatchNorm") != std::string::npos) return kv.key();
  }
  return {};
}
}  // namespace

void StochasticWeightAveraging::setup(Trainer&, LightningModule& m, const std::string& stage) {
  if (stage != "fit") {
    fitting_ = false;  // a fit that ended in an error did not reach on_fit_end
    return;
  }
  const std::string bn = find_batch_norm(m);
  VOLT_CHECK(bn.empty(), ConfigError, "StochasticWeightAveraging: the model has a BatchNorm module ('", bn,
             "'), whose running statistics would not match the averaged weights (volt does not recompute them): "
             "use EMAWeightAveraging (it averages the buffers too) or a model without BatchNorm");
  fitting_ = true;
  averaged_.clear();
  started_ = false;
  start_lrs_.clear();
  latest_update_epoch_ = -1;
  pending_epoch_ = -1;
}

void StochasticWeightAveraging::on_fit_start(Trainer& t, LightningModule&) {
  VOLT_CHECK(t.optimizers().size() == 1, ConfigError, "StochasticWeightAveraging works with one optimizer; ",
             "configure_optimizers returned ", t.optimizers().size());
  const size_t groups = t.optimizers()[0].optimizer->param_groups().size();
  VOLT_CHECK(options_.swa_lrs.values.size() == 1 || options_.swa_lrs.values.size() == groups, ConfigError,
             "StochasticWeightAveraging.swa_lrs: ", options_.swa_lrs.values.size(), " LRs for ", groups,
             " param groups: give one LR, or one per group");
  const int64_t max_epochs = t.max_epochs();
  const SwaEpochStart& s = options_.swa_epoch_start;
  VOLT_CHECK(!s.is_fraction || max_epochs < std::numeric_limits<int64_t>::max(), ConfigError,
             "StochasticWeightAveraging.swa_epoch_start: a fraction of max_epochs needs a finite trainer.max_epochs");
  const int64_t start =
      s.is_fraction ? static_cast<int64_t>(s.value * static_cast<double>(max_epochs)) : static_cast<int64_t>(s.value);
  swa_start_ = std::max<int64_t>(start - 1, 0);  // 0-based, as Lightning's swa_start
  swa_end_ = max_epochs - 1;
}

void StochasticWeightAveraging::on_fit_end(Trainer& t, LightningModule& m) {
  // As WeightAveraging's [Note: the final average]: an epoch cut short counts only now, after the
  // checkpoints of fit's end, and the model takes the average after them too.
  if (pending_epoch_ >= 0) epoch_update(t, m, pending_epoch_);
  pending_epoch_ = -1;
  // As Lightning: only a fit that reached SWA's last epoch ends with the averaged weights.
  if (!averaged_.empty() && latest_update_epoch_ == swa_end_) averaged_.copy_to_model(t, m);
  fitting_ = false;
}

bool StochasticWeightAveraging::in_swa(int64_t epoch) const {
  return fitting_ && epoch >= swa_start_ && epoch <= swa_end_;
}

void StochasticWeightAveraging::epoch_update(Trainer& t, LightningModule& m, int64_t epoch) {
  if (!in_swa(epoch) || epoch <= latest_update_epoch_) return;
  averaged_.update(t, m, avg_fn_);
  latest_update_epoch_ = epoch;
}

double StochasticWeightAveraging::swa_lr(int64_t epoch, size_t group, double start_lr) const {
  const std::vector<double>& lrs = options_.swa_lrs.values;
  const double target = lrs.size() == 1 ? lrs[0] : lrs.at(group);
  // SWALR: alpha goes from 0 to 1 over annealing_epochs (at once with 0), and the LR from the one
  // SWA started with to the target; SWALR's recurrence reduces to this closed form.
  const int64_t k = epoch - swa_start_;
  const double tt = options_.annealing_epochs == 0
                        ? 1.0
                        : std::clamp(static_cast<double>(k) / static_cast<double>(options_.annealing_epochs), 0.0, 1.0);
  const double alpha = options_.annealing_strategy == "cos" ? (1.0 - std::cos(M_PI * tt)) / 2.0 : tt;
  return target * alpha + start_lr * (1.0 - alpha);
}

void StochasticWeightAveraging::apply_lrs(Trainer& t) {
  auto& groups = t.optimizers()[0].optimizer->param_groups();
  for (size_t i = 0; i < groups.size(); ++i) groups[i].options().set_lr(swa_lr(t.current_epoch(), i, start_lrs_.at(i)));
}

void StochasticWeightAveraging::on_train_epoch_start(Trainer& t, LightningModule& m) {
  // A fit resumed from a checkpoint written at an epoch's last batch goes on with the next epoch
  // without that epoch's end: its update happens now, on the same weights.
  if (t.current_epoch() > 0) epoch_update(t, m, t.current_epoch() - 1);
  if (!in_swa(t.current_epoch())) return;
  if (!started_) {
    started_ = true;
    start_lrs_.clear();
    for (auto& g : t.optimizers()[0].optimizer->param_groups()) start_lrs_.push_back(g.options().get_lr());
    if (t.is_global_zero())
      spdlog::info("StochasticWeightAveraging: epoch {} starts SWA (LR annealed to swa_lrs over {} epochs)",
                   t.current_epoch(), options_.annealing_epochs);
  }
  apply_lrs(t);
}

void StochasticWeightAveraging::on_train_batch_start(Trainer& t, LightningModule&, const Batch&, int64_t) {
  if (started_ && in_swa(t.current_epoch())) apply_lrs(t);  // a scheduler stepped by interval "step" moved it
}

void StochasticWeightAveraging::on_train_batch_end(Trainer& t, LightningModule&, const torch::Tensor&, const Batch&,
                                                   int64_t) {
  if (started_ && in_swa(t.current_epoch())) apply_lrs(t);
}

void StochasticWeightAveraging::on_train_epoch_end(Trainer& t, LightningModule& m) {
  if (t.epoch_finished())
    epoch_update(t, m, t.current_epoch());
  else if (in_swa(t.current_epoch()))
    pending_epoch_ = t.current_epoch();  // counted in on_fit_end
}

void StochasticWeightAveraging::on_train_end(Trainer& t, LightningModule& m) {
  if (t.current_epoch() > 0) epoch_update(t, m, t.current_epoch() - 1);  // as in on_train_epoch_start
}

void StochasticWeightAveraging::on_exception(Trainer&, LightningModule&, const std::exception&) {
  // Still fitting: an OnExceptionCheckpoint (run after this) saves the average with the checkpoint.
  pending_epoch_ = -1;
}

void StochasticWeightAveraging::on_save_checkpoint(Trainer&, LightningModule&, CheckpointMeta& meta) {
  if (fitting_ && !averaged_.empty()) averaged_.save(state_key(), meta.tensors);
}

void StochasticWeightAveraging::on_load_checkpoint(Trainer& t, LightningModule& m, const CheckpointMeta& meta) {
  if (!fitting_ || averaged_.n_averaged() == 0) return;
  if (averaged_.load(t, m, state_key(), meta.tensors)) return;
  if (t.is_global_zero())
    spdlog::warn(
        "StochasticWeightAveraging: the checkpoint holds no averaged weights for this run's layout (written by "
        "another number of ranks, strategy or model): the average starts again from this epoch's weights");
  averaged_.set_n_averaged(0);
}

YAML::Node StochasticWeightAveraging::state_dict() const {
  YAML::Node n(YAML::NodeType::Map);
  n["n_averaged"] = averaged_.n_averaged();
  n["latest_update_epoch"] = latest_update_epoch_;
  n["started"] = started_;
  YAML::Node lrs(YAML::NodeType::Sequence);
  for (double lr : start_lrs_) lrs.push_back(lr);
  n["start_lrs"] = lrs;
  return n;
}

void StochasticWeightAveraging::load_state_dict(const YAML::Node& state) {
  if (state["n_averaged"]) averaged_.set_n_averaged(state["n_averaged"].as<int64_t>());
  if (state["latest_update_epoch"]) latest_update_epoch_ = state["latest_update_epoch"].as<int64_t>();
  if (state["started"]) started_ = state["started"].as<bool>();
  start_lrs_.clear();
  if (state["start_lrs"])
    for (const auto& v : state["start_lrs"]) start_lrs_.push_back(v.as<double>());
}

}  // namespace volt
