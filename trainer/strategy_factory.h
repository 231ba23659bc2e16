#pragma once
#include <memory>

#include "volt/strategies/strategy.h"
#include "volt/trainer/trainer_options.h"

namespace volt {
/// Builds the strategy `options.strategy` names ("auto" picks by devices). Throws ConfigError.
std::unique_ptr<Strategy> make_strategy(const TrainerOptions& options);
}  // namespace volt
