#include "volt/callbacks/gradient_accumulation_scheduler.h"

#include <spdlog/spdlog.h>

#include "volt/trainer/trainer.h"

namespace volt {

int64_t GradientAccumulationSchedulerOptions::Scheduling::parse_epoch(const std::string& key,
                                                                      const std::string& prefix) {
  size_t used = 0;
  int64_t epoch = -1;
  try {
    epoch = std::stoll(key, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  VOLT_CHECK(used == key.size() && !key.empty() && epoch >= 0, ConfigError, "config key '",
             detail::join_key(prefix, key), "': the schedule's keys are epochs, integers >= 0; got '", key, "'");
  return epoch;
}

void GradientAccumulationSchedulerOptions::validate(const std::string& prefix) const {
  const std::string key = detail::join_key(prefix, "scheduling");
  VOLT_CHECK(!scheduling.factors.empty(), ConfigError, "config key '", key,
             "': empty; give {epoch: factor} pairs, e.g. {0: 8, 4: 1}");
  for (const auto& [epoch, factor] : scheduling.factors) {
    VOLT_CHECK(epoch >= 0, ConfigError, "config key '", key, "': epoch ", epoch, " must be >= 0");
    VOLT_CHECK(factor >= 1, ConfigError, "config key '", key, ".", epoch,
               "': the accumulation factor must be >= 1, got ", factor);
  }
}

namespace {
std::map<int64_t, int64_t> checked(std::map<int64_t, int64_t> scheduling) {
  GradientAccumulationSchedulerOptions o;
  o.scheduling.factors = scheduling;
  o.validate();
  // Lightning: epochs before the first key accumulate 1.
  scheduling.emplace(0, 1);
  return scheduling;
}
}  // namespace

GradientAccumulationScheduler::GradientAccumulationScheduler(std::map<int64_t, int64_t> scheduling)
    : scheduling_(checked(std::move(scheduling))) {}

GradientAccumulationScheduler::GradientAccumulationScheduler(const Options& options)
    : GradientAccumulationScheduler(options.scheduling.factors) {}

int64_t GradientAccumulationScheduler::get_accumulate_grad_batches(int64_t epoch) const {
  auto it = scheduling_.upper_bound(epoch);
  return it == scheduling_.begin() ? 1 : std::prev(it)->second;
}

bool GradientAccumulationScheduler::going_to_accumulate_grad_batches() const {
  for (const auto& kv : scheduling_)
    if (kv.second > 1) return true;
  return false;
}

void GradientAccumulationScheduler::on_train_start(Trainer& trainer, LightningModule& module) {
  VOLT_CHECK(module.automatic_optimization, ConfigError,
             "GradientAccumulationScheduler: automatic gradient accumulation is not supported with manual "
             "optimization (the module sets automatic_optimization = false); remove the callback or accumulate in "
             "training_step");
  VOLT_CHECK(trainer.options().accumulate_grad_batches == 1, ConfigError,
             "config key 'trainer.accumulate_grad_batches' is ", trainer.options().accumulate_grad_batches,
             " and a GradientAccumulationScheduler is set: remove one of them (the callback's schedule decides each "
             "epoch's factor)");
}

void GradientAccumulationScheduler::on_train_epoch_start(Trainer& trainer, LightningModule&) {
  trainer.accumulate_grad_batches = get_accumulate_grad_batches(trainer.current_epoch());
}

}  // namespace volt
