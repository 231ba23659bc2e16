#pragma once
/// OnExceptionCheckpoint: saves `<dirpath>/<filename>.ckpt` when fit ends with an exception, as
/// Lightning's, so the run can resume from where it failed (ckpt_path=<that file>). A fit that
/// ends normally removes the file (a stale one from an earlier failure would otherwise be resumed).
///
/// Saving is collective. With one process every exception is saved for; with several, only a
/// TrainingError: the Trainer raises those on every rank together (a stop signal, a nan/inf loss,
/// SLURM's requeue, DDP's unused parameters), so every rank reaches the save. Another exception may
/// be one rank's alone while the others wait in a collective: then nothing is saved (a warning says
/// why) rather than risking a hang. A module that throws TrainingError itself on one rank only
/// defeats this rule: throw another error type there.
///
/// Thread-safety: the training thread only (hooks).
#include <string>

#include "volt/callbacks/callback.h"
#include "volt/core/errors.h"

namespace volt {

struct OnExceptionCheckpointOptions {
  std::string dirpath;  // required
  std::string filename = "on_exception";

  template <class V>
  void visit(V& v) {
    v("dirpath", dirpath)("filename", filename);
  }
  void validate(const std::string& prefix = "OnExceptionCheckpoint") const {
    VOLT_CHECK(!dirpath.empty(), ConfigError, "config key '", prefix,
               ".dirpath': required (the folder of the checkpoint saved on an exception)");
    VOLT_CHECK(!filename.empty() && filename.find('/') == std::string::npos, ConfigError, "config key '", prefix,
               ".filename': a file name without '/' and without the .ckpt extension, got '", filename, "'");
  }
};

class OnExceptionCheckpoint : public Callback {
 public:
  using Options = OnExceptionCheckpointOptions;
  explicit OnExceptionCheckpoint(Options options);
  OnExceptionCheckpoint(std::string dirpath, std::string filename = "on_exception");
  std::string state_key() const override { return "OnExceptionCheckpoint"; }

  /// `<dirpath>/<filename>.ckpt`.
  std::string ckpt_path() const;
  /// Saves ckpt_path() (see the file comment for multi-process runs).
  void on_exception(Trainer& trainer, LightningModule& module, const std::exception& error) override;
  /// After a fit that ended normally, rank 0 removes ckpt_path().
  void teardown(Trainer& trainer, LightningModule& module, const std::string& stage) override;

 private:
  Options options_;
};

}  // namespace volt
