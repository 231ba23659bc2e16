#pragma once
/// GradientAccumulationScheduler: changes trainer.accumulate_grad_batches by epoch, as Lightning's.
/// `scheduling` maps the first epoch of each phase to its accumulation factor ({0: 8, 4: 1}: 8
/// batches per optimizer step in epochs 0-3, then 1); without an entry for epoch 0, epochs before
/// the first key accumulate 1. Refused with manual optimization and when trainer.accumulate_grad_batches
/// is also set (not 1).
///
/// Thread-safety: the training thread only (hooks).
#include <cstdint>
#include <map>
#include <string>
#include <type_traits>

#include "volt/callbacks/callback.h"
#include "volt/core/errors.h"
#include "volt/core/options.h"

namespace volt {

/// The constructor's argument as an options struct (for configs:
/// `class_path: GradientAccumulationScheduler, init_args: {scheduling: {0: 8, 4: 1}}`).
struct GradientAccumulationSchedulerOptions {
  /// epoch -> factor. The keys are read as integers; an entry with a key that is not one is a
  /// ConfigError naming it.
  struct Scheduling {
    std::map<int64_t, int64_t> factors;
    template <class V>
    void visit(V& v) {
      if constexpr (std::is_same_v<V, YamlReader>) {
        for (const auto& kv : v.node()) {
          const std::string key = kv.first.Scalar();
          int64_t factor = 0;
          v(key.c_str(), factor);
          factors[parse_epoch(key, v.prefix())] = factor;
        }
      } else {
        for (auto& [epoch, factor] : factors) v(std::to_string(epoch).c_str(), factor);
      }
    }
    /// `key` as an epoch: an integer >= 0 (ConfigError naming `<prefix>.<key>` otherwise).
    static int64_t parse_epoch(const std::string& key, const std::string& prefix);
  };
  Scheduling scheduling;

  template <class V>
  void visit(V& v) {
    v("scheduling", scheduling);
  }
  /// Lightning's checks: not empty, epochs >= 0, factors >= 1.
  void validate(const std::string& prefix = "GradientAccumulationScheduler") const;
};

class GradientAccumulationScheduler : public Callback {
 public:
  using Options = GradientAccumulationSchedulerOptions;
  /// ConfigError on an empty schedule, an epoch < 0 or a factor < 1.
  explicit GradientAccumulationScheduler(std::map<int64_t, int64_t> scheduling);
  explicit GradientAccumulationScheduler(const Options& options);
  std::string state_key() const override { return "GradientAccumulationScheduler"; }

  /// ConfigError with manual optimization, or when trainer.accumulate_grad_batches is not 1.
  void on_train_start(Trainer& trainer, LightningModule& module) override;
  /// Sets trainer.accumulate_grad_batches to this epoch's factor.
  void on_train_epoch_start(Trainer& trainer, LightningModule& module) override;

  /// The factor of `epoch`: the value of the last key <= epoch.
  int64_t get_accumulate_grad_batches(int64_t epoch) const;
  /// Whether any phase accumulates (a factor > 1).
  bool going_to_accumulate_grad_batches() const;
  const std::map<int64_t, int64_t>& scheduling() const { return scheduling_; }

 private:
  std::map<int64_t, int64_t> scheduling_;
};

}  // namespace volt
