#pragma once
/// Progress bar on rank 0: epoch, step, rate (it/s), ETA and the prog_bar metrics. Redraws one line
/// on a terminal; prints a line every 10% of an epoch when stderr is not a terminal (CI, files).
/// It reads the loss and the metrics (a wait for the device) only when it draws, so refresh_rate
/// also bounds how often it synchronizes with the device.
#include <chrono>

#include "volt/callbacks/callback.h"
#include "volt/core/errors.h"

namespace volt {

/// The constructor's argument as an options struct (for configs: `class_path: ProgressBar`).
struct ProgressBarOptions {
  int64_t refresh_rate = 1;

  template <class V>
  void visit(V& v) {
    v("refresh_rate", refresh_rate);
  }
  void validate(const std::string& prefix = "ProgressBar") const {
    VOLT_CHECK(refresh_rate >= 1, ConfigError, "config key '", prefix, ".refresh_rate': must be >= 1, got ",
               refresh_rate);
  }
};

class ProgressBar : public Callback {
 public:
  /// refresh_rate: redraw every N batches on a terminal.
  explicit ProgressBar(int64_t refresh_rate = 1) : refresh_rate_(refresh_rate) {}
  std::string state_key() const override { return "ProgressBar"; }
  void on_train_epoch_start(Trainer&, LightningModule&) override;
  void on_train_batch_end(Trainer&, LightningModule&, const torch::Tensor& loss, const Batch&, int64_t) override;
  void on_train_epoch_end(Trainer&, LightningModule&) override;
  void on_validation_end(Trainer&, LightningModule&) override;

 private:
  void draw(Trainer& t, int64_t done, bool final);
  int64_t refresh_rate_;
  bool tty_ = false;
  int64_t start_batch_ = 0;
  int64_t last_printed_decile_ = -1;
  torch::Tensor last_loss_;  // the last batch's loss, read when drawn
  std::chrono::steady_clock::time_point start_;
};

}  // namespace volt
