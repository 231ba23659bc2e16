#pragma once
/// Work that global rank 0 does alone while the other ranks wait: prepare_data of a module or a data
/// module (downloads, tokenization written to disk).
#include <functional>
#include <string>

#include "volt/strategies/strategy.h"

namespace volt::detail {

/// Runs `fn` on global rank 0; every rank then waits for it. When it throws, rank 0 rethrows its
/// own error (of its own type) and the other ranks throw a DataError with its message, naming
/// `what` ("the module's prepare_data()"). Collective.
void run_on_global_zero(Strategy& strategy, const std::function<void()>& fn, const std::string& what);

}  // namespace volt::detail
