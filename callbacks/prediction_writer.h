#pragma once
/// PredictionWriter: writes each rank's predictions to files as Trainer::predict produces them (a
/// ready-made Lightning BasePredictionWriter), so a large prediction run needs neither the outputs
/// in memory (predict(..., return_predictions=false)) nor a gather to rank 0.
///
/// Files, under output_dir (default: <default_root_dir>/predictions), one set per rank:
///   write_interval "batch":  rank_<r>/dataloader_<d>/batch_<i>.pt, written at each batch's end;
///   write_interval "epoch":  rank_<r>.pt, written once at the end, holding every batch.
///   "batch_and_epoch": both.
/// Each file is a dict of tensors in torch.save's format (Python: `torch.load(f)`, with
/// weights_only=True too; checkpoint/tensor_dict_file.h), one key
/// per output tensor — "<i>" positional, "<name>" named, "<child>.<name>" nested, prefixed by
/// "dataloader_<d>/batch_<i>/" in the epoch file — plus "sample_indices" (the dataset indices of
/// the batch's samples; absent for iterable datasets), so predictions can be matched to inputs
/// whatever the rank split. Every file is written atomically (temporary file, fsync, rename).
/// At predict's start each rank checks that it can write into output_dir (a ConfigError before any
/// batch otherwise) and removes its own files of an earlier predict there, with a warning.
///
/// Ownership: owned by the Trainer (shared). Thread-safety: the training thread only.
#include <string>
#include <vector>

#include "volt/callbacks/callback.h"
#include "volt/core/choice.h"

namespace volt {

enum class WriteInterval { Batch, Epoch, BatchAndEpoch };

template <>
struct ChoiceNames<WriteInterval> {
  static const std::vector<std::pair<WriteInterval, const char*>>& names() {
    static const std::vector<std::pair<WriteInterval, const char*>> n = {
        {WriteInterval::Batch, "batch"},
        {WriteInterval::Epoch, "epoch"},
        {WriteInterval::BatchAndEpoch, "batch_and_epoch"}};
    return n;
  }
  static std::string normalize(const std::string& s) { return detail::to_lower(s); }
};

struct PredictionWriterOptions {
  std::string output_dir;  // "" = <trainer.default_root_dir>/predictions
  Choice<WriteInterval> write_interval = WriteInterval::Batch;

  template <class V>
  void visit(V& v) {
    v("output_dir", output_dir)("write_interval", write_interval);
  }
  /// ConfigError naming the key for an unknown write_interval.
  void validate();
};

class PredictionWriter : public Callback {
 public:
  explicit PredictionWriter(PredictionWriterOptions options = {});
  std::string state_key() const override { return "PredictionWriter"; }
  void on_predict_start(Trainer& trainer, LightningModule&) override;
  void on_predict_batch_end(Trainer& trainer, LightningModule&, const Batch& outputs, const Batch& batch,
                            const std::vector<int64_t>& sample_indices, int64_t batch_idx,
                            int64_t dataloader_idx) override;
  void on_predict_epoch_end(Trainer& trainer, LightningModule&) override;
  /// The folder written to during the last predict call.
  const std::string& output_dir() const { return dir_; }

 private:
  PredictionWriterOptions options_;
  std::string dir_;
  std::vector<std::pair<std::string, torch::Tensor>> epoch_;  // the epoch file's entries so far
};

}  // namespace volt
