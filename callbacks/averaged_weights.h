#pragma once
/// AveragedWeights: the averaged copy of a model's weights that the weight-averaging callbacks keep
/// (torch.optim.swa_utils.AveragedModel's role), holding exactly what this rank holds of the model.
///
/// The copy mirrors the strategy's state layout (Strategy::state_layout): the whole parameters on
/// one device and under DDP, this rank's flat shard of every unit under FSDP (the fp32 master
/// shard the optimizer steps, padding included), so a sharded model's copy uses 1/world of the
/// memory and nothing is ever gathered. Buffers, which no strategy shards, are whole.
///
/// Ownership: owns the copy; borrows the Trainer and module only for the duration of a call.
/// Thread-safety: the training thread only.
#include <torch/types.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace volt {

class Trainer;
class LightningModule;

/// An averaging function: the new averaged value from the averaged value, the model's current
/// value and the number of models averaged so far (>= 1), as AveragedModel's `avg_fn`.
using AveragingFn =
    std::function<torch::Tensor(const torch::Tensor& averaged, const torch::Tensor& current, int64_t num_averaged)>;

/// The equally weighted running mean (AveragedModel's default):
/// averaged + (current - averaged) / (num_averaged + 1).
torch::Tensor running_mean(const torch::Tensor& averaged, const torch::Tensor& current, int64_t num_averaged);

namespace detail {

/// ConfigError naming `key` unless `device` is null or names a device ("cpu", "cuda:1").
void validate_averaging_device(const std::optional<std::string>& device, const std::string& key);

class AveragedWeights {
 public:
  /// `device`: where the copy lives ("" = beside each weight, else e.g. "cpu"). `buffers`: keep the
  /// module's buffers too, averaged when `average_buffers` (floating ones) or else copied at each
  /// update.
  AveragedWeights(std::string device, bool buffers, bool average_buffers);

  bool empty() const { return copy_.empty(); }
  /// Models averaged so far (0: the copy, if any, is a plain snapshot).
  int64_t n_averaged() const { return n_averaged_; }
  void set_n_averaged(int64_t n) { n_averaged_ = n; }
  /// Elements the copy holds on this rank.
  int64_t numel() const;
  /// Drops the copy and the count.
  void clear();

  /// Makes the copy equal to the model's current weights (the count is unchanged).
  void snapshot(Trainer& t, LightningModule& m);
  /// One more model averaged: the first update copies, later ones apply `fn`.
  void update(Trainer& t, LightningModule& m, const AveragingFn& fn);
  /// Exchanges the copy and the model's weights (validation on the averaged weights).
  void swap(Trainer& t, LightningModule& m);
  /// Writes the copy into the model.
  void copy_to_model(Trainer& t, LightningModule& m);

  /// The copy as `<prefix>/<name>` tensors (CheckpointMeta::tensors).
  void save(const std::string& prefix, std::map<std::string, torch::Tensor>& out) const;
  /// Takes the copy from `in` (as save() wrote it). Returns false, leaving the copy empty, when a
  /// tensor of this rank's layout is missing or has another shape or dtype (a checkpoint of another
  /// number of ranks, strategy or model).
  bool load(Trainer& t, LightningModule& m, const std::string& prefix, const std::map<std::string, torch::Tensor>& in);

 private:
  struct Live {
    std::string name;     // "param/<name>", "buffer/<name>" or "flat/<unit index>/<first parameter>"
    torch::Tensor value;  // the strategy's own tensor
    bool averaged;        // false: copied (integer buffers, or buffers with average_buffers false)
  };
  /// The tensors the model's weights live in on this rank now.
  std::vector<Live> live(Trainer& t, LightningModule& m) const;
  /// The copy's tensor for `l` (a ConfigError when the model changed since the copy was made).
  torch::Tensor& copy_of(const Live& l);

  std::string device_;
  bool buffers_, average_buffers_;
  int64_t n_averaged_ = 0;
  std::map<std::string, torch::Tensor> copy_;
};

}  // namespace detail
}  // namespace volt
