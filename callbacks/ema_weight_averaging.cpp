#include "volt/callbacks/ema_weight_averaging.h"

namespace volt {

namespace {
WeightAveragingOptions base_options(const EMAWeightAveragingOptions& o) {
  o.validate();
  WeightAveragingOptions b;
  b.device = o.device;
  b.use_buffers = o.use_buffers;
  return b;
}
}  // namespace

void EMAWeightAveragingOptions::validate(const std::string& prefix) const {
  WeightAveragingOptions{device, use_buffers}.validate(prefix);
  VOLT_CHECK(decay >= 0.0 && decay <= 1.0, ConfigError, "config key '", prefix, ".decay': must be in [0, 1], got ",
             decay);
  VOLT_CHECK(update_every_n_steps >= 0, ConfigError, "config key '", prefix,
             ".update_every_n_steps': must be >= 0 (0: no updates after steps), got ", update_every_n_steps);
  VOLT_CHECK(!update_starting_at_step || *update_starting_at_step >= 0, ConfigError, "config key '", prefix,
             ".update_starting_at_step': must be >= 0 or null, got ", update_starting_at_step.value_or(0));
  VOLT_CHECK(!update_starting_at_epoch || *update_starting_at_epoch >= 0, ConfigError, "config key '", prefix,
             ".update_starting_at_epoch': must be >= 0 or null, got ", update_starting_at_epoch.value_or(0));
}

EMAWeightAveraging::EMAWeightAveraging(EMAWeightAveragingOptions options)
    : WeightAveraging(base_options(options),
                      [decay = options.decay](const torch::Tensor& averaged, const torch::Tensor& current, int64_t) {
                        return averaged * decay + current * (1.0 - decay);
                      }),
      options_(std::move(options)) {}

bool EMAWeightAveraging::should_update(std::optional<int64_t> step_idx, std::optional<int64_t> epoch_idx) {
  if (step_idx) {
    const bool started = !options_.update_starting_at_step || *step_idx >= *options_.update_starting_at_step;
    const bool due = options_.update_every_n_steps > 0 && *step_idx % options_.update_every_n_steps == 0;
    if (started && due) return true;
  }
  return epoch_idx && options_.update_starting_at_epoch && *epoch_idx >= *options_.update_starting_at_epoch;
}

}  // namespace volt
