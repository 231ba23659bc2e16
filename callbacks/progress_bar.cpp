#include "volt/callbacks/progress_bar.h"

#include <unistd.h>

#include <cstdio>
#include <iomanip>
#include <sstream>

#include "volt/trainer/trainer.h"

namespace volt {

namespace {
std::string hms(double s) {
  if (!(s >= 0) || s > 1e7) return "?";
  int64_t t = static_cast<int64_t>(s + 0.5);
  std::ostringstream os;
  os << std::setfill('0');
  if (t >= 3600) os << t / 3600 << ':' << std::setw(2);
  os << (t / 60) % 60 << ':' << std::setw(2) << t % 60;
  return os.str();
}
}  // namespace

void ProgressBar::on_train_epoch_start(Trainer& t, LightningModule&) {
  tty_ = ::isatty(STDERR_FILENO) != 0;
  start_ = std::chrono::steady_clock::now();
  start_batch_ = -1;
  last_printed_decile_ = -1;
}

void ProgressBar::on_train_batch_end(Trainer& t, LightningModule&, const torch::Tensor& loss, const Batch&,
                                     int64_t idx) {
  if (!t.is_global_zero()) return;
  if (start_batch_ < 0) start_batch_ = idx;
  last_loss_ = loss;
  const int64_t done = idx + 1;
  if (tty_) {
    if (done % refresh_rate_ == 0 || done == t.num_training_batches()) draw(t, done, false);
  } else if (t.num_training_batches() == DataLoader::kUnknownLength) {
    if (done % 100 == 0) draw(t, done, true);  // no deciles of an unknown length
  } else {
    const int64_t decile = done * 10 / std::max<int64_t>(1, t.num_training_batches());
    if (decile != last_printed_decile_) {
      last_printed_decile_ = decile;
      draw(t, done, true);
    }
  }
}

void ProgressBar::draw(Trainer& t, int64_t done, bool newline) {
  const bool known = t.num_training_batches() != DataLoader::kUnknownLength;
  const int64_t total = known ? t.num_training_batches() : 0;  // an iterable dataset without a length
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int64_t ran = done - start_batch_;  // batches since the epoch (or resume) started
  const double rate = elapsed > 0 ? static_cast<double>(ran) / elapsed : 0.0;
  const double eta = rate > 0 && known ? static_cast<double>(total - done) / rate : -1;
  const int width = 24;
  const int filled = total > 0 ? static_cast<int>(width * done / total) : 0;
  std::ostringstream os;
  os << "Epoch " << t.current_epoch() << ": " << std::setw(3) << (total ? 100 * done / total : 0) << "%|"
     << std::string(filled, '#') << std::string(width - filled, ' ') << "| " << done << '/'
     << (known ? std::to_string(total) : std::string("?")) << " [" << hms(elapsed) << '<' << hms(eta) << ", "
     << std::fixed << std::setprecision(2) << rate << "it/s"
     << ", step=" << t.global_step();
  if (last_loss_.defined() && last_loss_.numel() == 1)
    os << ", loss=" << std::setprecision(4) << last_loss_.item<double>();
  for (const auto& [k, v] : t.progress_bar_metrics())
    if (k != "loss") os << ", " << k << '=' << std::setprecision(4) << v;
  os << ']';
  std::fprintf(stderr, newline ? "%s\n" : "\r%s\033[K", os.str().c_str());
  std::fflush(stderr);
}

void ProgressBar::on_train_epoch_end(Trainer& t, LightningModule&) {
  if (t.is_global_zero() && tty_) std::fprintf(stderr, "\n");
}

void ProgressBar::on_validation_end(Trainer& t, LightningModule&) {
  if (!t.is_global_zero() || t.sanity_checking()) return;
  std::ostringstream os;
  for (const auto& [k, v] : t.callback_metrics())
    if (k.rfind("val", 0) == 0) os << ' ' << k << '=' << std::setprecision(5) << v;
  if (!os.str().empty()) std::fprintf(stderr, "%sValidation:%s\n", tty_ ? "\n" : "", os.str().c_str());
}

}  // namespace volt
