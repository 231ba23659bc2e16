#include "volt/callbacks/on_exception_checkpoint.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include "volt/core/files.h"
#include "volt/trainer/trainer.h"

namespace volt {

OnExceptionCheckpoint::OnExceptionCheckpoint(Options options) : options_(std::move(options)) { options_.validate(); }

OnExceptionCheckpoint::OnExceptionCheckpoint(std::string dirpath, std::string filename)
    : OnExceptionCheckpoint(Options{std::move(dirpath), std::move(filename)}) {}

std::string OnExceptionCheckpoint::ckpt_path() const { return options_.dirpath + "/" + options_.filename + ".ckpt"; }

void OnExceptionCheckpoint::on_exception(Trainer& trainer, LightningModule&, const std::exception& error) {
  if (!trainer.module()) return;  // failed before the module was attached: nothing to save
  if (trainer.world_size() > 1 && !dynamic_cast<const TrainingError*>(&error)) {
    spdlog::warn(
        "OnExceptionCheckpoint: not saving {}: the error may be this rank's alone, and saving is collective (the "
        "other ranks may be waiting elsewhere); only errors every rank raises together (TrainingError: a stop "
        "signal, a nan loss) are saved for in a run of {} processes",
        ckpt_path(), trainer.world_size());
    return;
  }
  try {
    trainer.save_checkpoint(ckpt_path());
    if (trainer.is_global_zero()) spdlog::info("OnExceptionCheckpoint: saved {}", ckpt_path());
  } catch (const std::exception& e) {  // the original error is the one to report
    spdlog::error("OnExceptionCheckpoint: could not save {}: {}", ckpt_path(), e.what());
  }
}

void OnExceptionCheckpoint::teardown(Trainer& trainer, LightningModule&, const std::string& stage) {
  if (stage != "fit" || !trainer.is_global_zero()) return;
  const std::string path = ckpt_path();
  if (detail::path_exists(path) && !detail::remove_tree(path))
    spdlog::warn("OnExceptionCheckpoint: could not remove {}", path);
}

}  // namespace volt
