#pragma once
/// StochasticWeightAveraging (SWA), as Lightning's callback of that name: from epoch
/// `swa_epoch_start` on, the learning rate of every param group is annealed to `swa_lrs` over
/// `annealing_epochs` epochs (torch's SWALR, "cos" or "linear"), and the weights are averaged
/// (equally, or by `avg_fn`) at the end of each of those epochs; when fit ends (on_fit_end, after
/// the checkpoints of its end, which keep the trained weights), if it reached the last epoch, the
/// averaged weights go into the model.
///
/// Where volt differs from Lightning:
///   - The average is updated at the end of each SWA epoch (epochs swa_start..max_epochs-1, the
///     last epoch's weights included); Lightning updates at the start of each, averaging the
///     weights the previous epoch ended with and leaving out the last epoch's training.
///   - The user's LR scheduler is not replaced but overruled: it keeps stepping (so its state
///     resumes as saved) while the SWA schedule sets every group's LR at the start of each SWA
///     epoch and around each batch.
///   - Sharded models work: under FSDP each rank averages its own shards (detail::AveragedWeights),
///     1/world of the model, nothing gathered.
///   - A model with BatchNorm modules is refused (ConfigError at fit's set-up): their running
///     statistics would have to be recomputed for the averaged weights (Lightning spends one more
///     epoch on that), which volt does not do.
/// Its state (whether SWA started and the LRs it started from, the epoch of the last update, the
/// number of models averaged and, as CheckpointMeta::tensors, the averaged copy) is checkpointed,
/// so a resumed fit ends with the same weights as an uninterrupted one.
///
/// Ownership: owns the averaged copy (kept after fit). Thread-safety: the training thread only.
#include <optional>
#include <string>
#include <vector>

#include "volt/callbacks/averaged_weights.h"
#include "volt/callbacks/callback.h"
#include "volt/core/errors.h"
#include "volt/core/options.h"
#include "volt/core/options_help.h"

namespace volt {

/// swa_lrs: one LR for every param group (a float in YAML) or one per group (a list).
struct SwaLrs {
  std::vector<double> values;  // empty: not given
};

/// swa_epoch_start: an int is the 1-based epoch SWA starts in, a float a fraction of max_epochs
/// (SWA starts in epoch int(fraction * max_epochs), 1-based), as Lightning.
struct SwaEpochStart {
  double value = 0.8;
  bool is_fraction = true;
};

namespace detail {
template <>
struct YamlCodec<SwaLrs> {
  static SwaLrs decode(const YAML::Node& n, const std::string& key);
  static YAML::Node encode(const SwaLrs& v);
};
template <>
struct YamlCodec<SwaEpochStart> {
  static SwaEpochStart decode(const YAML::Node& n, const std::string& key);
  static YAML::Node encode(const SwaEpochStart& v);
};
template <>
struct HelpType<SwaLrs> {
  static std::string name() { return "float|list[float]"; }
};
template <>
struct HelpType<SwaEpochStart> {
  static std::string name() { return "int|float"; }
};
}  // namespace detail

struct StochasticWeightAveragingOptions {
  SwaLrs swa_lrs;  // required
  SwaEpochStart swa_epoch_start;
  int64_t annealing_epochs = 10;
  std::string annealing_strategy = "cos";
  /// Where the averaged copy lives: "cpu" (the default, as Lightning), another device, or null for
  /// the weights' own device.
  std::optional<std::string> device = std::string("cpu");

  template <class V>
  void visit(V& v) {
    v("swa_lrs", swa_lrs)("swa_epoch_start", swa_epoch_start)("annealing_epochs", annealing_epochs)(
        "annealing_strategy", annealing_strategy)("device", device);
  }
  void validate(const std::string& prefix = "StochasticWeightAveraging") const;
};

class StochasticWeightAveraging : public Callback {
 public:
  using Options = StochasticWeightAveragingOptions;
  /// `avg_fn` (C++ only): the averaging function; default the equally weighted running mean.
  explicit StochasticWeightAveraging(StochasticWeightAveragingOptions options, AveragingFn avg_fn = running_mean);
  std::string state_key() const override { return "StochasticWeightAveraging"; }

  void setup(Trainer&, LightningModule&, const std::string& stage) override;
  void on_fit_start(Trainer&, LightningModule&) override;
  void on_fit_end(Trainer&, LightningModule&) override;
  void on_train_epoch_start(Trainer&, LightningModule&) override;
  void on_train_batch_start(Trainer&, LightningModule&, const Batch&, int64_t batch_idx) override;
  void on_train_batch_end(Trainer&, LightningModule&, const torch::Tensor& loss, const Batch&,
                          int64_t batch_idx) override;
  void on_train_epoch_end(Trainer&, LightningModule&) override;
  void on_train_end(Trainer&, LightningModule&) override;
  void on_exception(Trainer&, LightningModule&, const std::exception&) override;
  void on_save_checkpoint(Trainer&, LightningModule&, CheckpointMeta&) override;
  void on_load_checkpoint(Trainer&, LightningModule&, const CheckpointMeta&) override;
  YAML::Node state_dict() const override;
  void load_state_dict(const YAML::Node& state) override;

  /// The first and last SWA epoch (0-based), known once fit started.
  int64_t swa_start() const { return swa_start_; }
  int64_t swa_end() const { return swa_end_; }
  /// The LR of param group `group` in SWA epoch `epoch` (SWALR's value), given the LR it had when
  /// SWA started.
  double swa_lr(int64_t epoch, size_t group, double start_lr) const;
  int64_t n_averaged() const { return averaged_.n_averaged(); }
  /// Elements of the averaged copy on this rank (under FSDP: the shards', about 1/world).
  int64_t averaged_numel() const { return averaged_.numel(); }

 private:
  bool in_swa(int64_t epoch) const;
  /// The update after epoch `epoch` when it is an SWA epoch not averaged yet.
  void epoch_update(Trainer& t, LightningModule& m, int64_t epoch);
  /// Sets every param group's LR to the SWA schedule's value for the current epoch.
  void apply_lrs(Trainer& t);

  StochasticWeightAveragingOptions options_;
  AveragingFn avg_fn_;
  detail::AveragedWeights averaged_;
  int64_t swa_start_ = 0, swa_end_ = -1;
  int64_t pending_epoch_ = -1;     // an epoch cut short, whose update waits for on_fit_end
  bool started_ = false;           // SWA's first epoch began (start_lrs_ hold the LRs then)
  std::vector<double> start_lrs_;  // per param group
  int64_t latest_update_epoch_ = -1;
  bool fitting_ = false;
};

}  // namespace volt
