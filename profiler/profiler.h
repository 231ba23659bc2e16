#pragma once
/// Profiler: where the time of a fit goes, as Lightning's profilers (trainer.profiler). Code marks
/// a phase with a scope:
///
///   auto scope = profile(profiler, "backward");   // RAII: timed until `scope` is destroyed
///
/// With no profiler (a null pointer, the default) a scope costs one branch and records nothing.
/// The Trainer owns the profiler chosen by `trainer.profiler` (simple_profiler.h,
/// pytorch_profiler.h) and lends it, as a non-owning pointer, to its Strategy and HookDispatcher.
///
/// Phase names (the rows of the simple profiler's table, the ranges of the PyTorch trace):
/// run_training_epoch, run_training_batch, dataloader_next, training_step, backward,
/// optimizer_step, zero_grad, run_validation, validation_step, save_checkpoint, load_checkpoint,
/// [DDP]all_reduce_bucket, [DDP]all_reduce_wait, [FSDP]all_gather, [FSDP]reduce_scatter, and one per
/// hook: "[Callback]ModelCheckpoint.on_train_epoch_end", "[LightningModule]MyModel.on_fit_start".
///
/// Thread-safety: start / stop may be called from several threads at once (autograd's threads run
/// gradient hooks); setup / teardown / summary from the training thread only.
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace volt {

class Profiler {
 public:
  virtual ~Profiler() = default;

  /// A timed phase: started when constructed with a profiler, stopped when destroyed. Movable,
  /// not copyable; a default-constructed Scope records nothing.
  class Scope {
   public:
    Scope() = default;
    /// `action` must outlive the scope (a literal or a string kept by the caller).
    Scope(Profiler* p, std::string_view action) : p_(p), action_(action) {
      token_ = p_->start(action_);
      t0_ = std::chrono::steady_clock::now();
    }
    /// Owns `action` (a name built for this call, e.g. a hook's).
    Scope(Profiler* p, std::string&& action) : p_(p), owned_(std::move(action)) {
      action_ = owned_;
      token_ = p_->start(action_);
      t0_ = std::chrono::steady_clock::now();
    }
    Scope(Scope&& o) noexcept { *this = std::move(o); }
    Scope& operator=(Scope&& o) noexcept {
      if (this == &o) return *this;
      end();
      p_ = std::exchange(o.p_, nullptr);
      owned_ = std::move(o.owned_);
      action_ = owned_.empty() ? o.action_ : std::string_view(owned_);
      token_ = std::exchange(o.token_, nullptr);
      t0_ = o.t0_;
      return *this;
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    ~Scope() { end(); }
    /// Stops the phase now (idempotent).
    void end() {
      if (!p_) return;
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
      std::exchange(p_, nullptr)->stop(action_, s, std::exchange(token_, nullptr));
    }

   private:
    Profiler* p_ = nullptr;
    std::string owned_;
    std::string_view action_;
    void* token_ = nullptr;
    std::chrono::steady_clock::time_point t0_;
  };

  /// A scope timing `action` on this profiler.
  Scope profile(std::string_view action) { return Scope(this, action); }

  /// Called when `action` begins; returns a token handed back to stop() (the PyTorch profiler's
  /// open range), or nullptr.
  virtual void* start(std::string_view action) { return nullptr; }
  /// Called when `action` ends, `seconds` after it began.
  virtual void stop(std::string_view action, double seconds, void* token) = 0;

  /// Starts a run of `stage` ("fit"): clears what was recorded. `dir` is where reports go (the log
  /// directory, or default_root_dir), `rank` this process's global rank.
  virtual void setup(const std::string& stage, const std::string& dir, int64_t rank) = 0;
  /// Ends the run: prints / writes the report (rank 0 prints). Never throws for a report that
  /// could not be written (it logs a warning): profiling must not fail a finished fit.
  virtual void teardown() = 0;
  /// The report as text (the simple profiler's table; empty when the profiler has none).
  virtual std::string summary() const { return {}; }
};

/// profiler->profile(action), or a Scope that records nothing when `profiler` is null.
inline Profiler::Scope profile(Profiler* profiler, std::string_view action) {
  return profiler ? Profiler::Scope(profiler, action) : Profiler::Scope();
}

}  // namespace volt
